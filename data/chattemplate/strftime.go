package chattemplate

import (
	"fmt"
	"strings"
	"time"
)

// strftime formats t as Python's datetime.strftime(format) does on Linux
// (C locale) for the directives chat templates use: %a %A %b %B %d %e %H
// %I %j %m %M %p %S %y %Y %%, and %Z and %z as
// empty (transformers formats a naive datetime.now()), with glibc's "-" flag (%-d: no
// padding). An unknown directive is written as given.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(n, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, n)
			} else {
				fmt.Fprintf(&b, "%d", n)
			}
		}
		switch d := format[i]; d {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if pad {
				fmt.Fprintf(&b, "%2d", t.Day())
			} else {
				fmt.Fprintf(&b, "%d", t.Day())
			}
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num((t.Hour()+11)%12+1, 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'm':
			num(int(t.Month()), 2)
		case 'M':
			num(t.Minute(), 2)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'S':
			num(t.Second(), 2)
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'Z', 'z':
			// transformers formats datetime.now(), a naive time: no zone.
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(d)
		}
	}
	return b.String()
}
