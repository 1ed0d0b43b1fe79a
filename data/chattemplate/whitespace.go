package chattemplate

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Whitespace control is applied here, before the template reaches
// github.com/ardanlabs/jinja, exactly as jinja2's lexer applies it with
// transformers' settings (trim_blocks, lstrip_blocks, keep_trailing_newline
// off), because that library applies a tag's stripping to the nearest text
// even across an expression: in "Effort: {{ x }}{%- endif %}" it strips
// the space after "Effort:", which jinja2 keeps. normalize rewrites the
// source into one that needs no whitespace control: the stripping done,
// the "-" and "+" markers gone, comments dropped, raw blocks turned into
// string literals, and the whitespace at the edges of each text written
// as a string expression, which the library's own trim_blocks and
// lstrip_blocks leave alone.

// tagKind is the kind of a Jinja tag.
type tagKind int

const (
	varTag     tagKind = iota // {{ … }}
	blockTag                  // {% … %}
	commentTag                // {# … #}
)

// isSpace is Python's str.isspace, the whitespace of jinja2's \s and
// rstrip: Unicode's, and the separators U+001C to U+001F.
func isSpace(r rune) bool { return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f }

// skipSpace returns the index of the first non-space rune of s at or after i.
func skipSpace(s string, i int) int {
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isSpace(r) {
			break
		}
		i += n
	}
	return i
}

// normalize returns source rewritten as described above.
func normalize(source string) (string, error) {
	src := strings.ReplaceAll(strings.ReplaceAll(source, "\r\n", "\n"), "\r", "\n")
	src = strings.TrimSuffix(src, "\n") // keep_trailing_newline=False
	var out strings.Builder
	pos, lineStarting := 0, true
	for pos < len(src) {
		start := nextOpener(src, pos)
		if start < 0 {
			writeText(&out, src[pos:])
			break
		}
		kind := map[byte]tagKind{'{': varTag, '%': blockTag, '#': commentTag}[src[start+1]]
		sign := byte(0)
		innerStart := start + 2
		if innerStart < len(src) && (src[innerStart] == '-' || src[innerStart] == '+') {
			sign = src[innerStart]
			innerStart++
		}
		text := lstrip(src[pos:start], sign, kind, lineStarting)
		innerEnd, closeSign, err := findCloser(src, innerStart, kind)
		if err != nil {
			return "", err
		}
		inner := src[innerStart:innerEnd]
		end := innerEnd + 2
		if closeSign != 0 {
			end++
		}
		if kind == blockTag && isKeyword(inner, "raw") {
			if closeSign == '-' {
				end = skipSpace(src, end)
			}
			content, after, err := rawBlock(src, end)
			if err != nil {
				return "", err
			}
			writeText(&out, text)
			writeLiteral(&out, content)
			pos, lineStarting = after, after > 0 && src[after-1] == '\n'
			continue
		}
		switch {
		case closeSign == '-':
			end = skipSpace(src, end)
		case closeSign == 0 && kind != varTag && end < len(src) && src[end] == '\n':
			end++ // trim_blocks
		}
		writeText(&out, text)
		switch kind {
		case varTag:
			out.WriteString("{{ " + inner + " }}")
		case blockTag:
			out.WriteString("{% " + inner + " %}")
		}
		pos, lineStarting = end, src[end-1] == '\n'
	}
	return out.String(), nil
}

// nextOpener returns the index of the first "{{", "{%" or "{#" at or
// after pos, or -1.
func nextOpener(src string, pos int) int {
	for i := strings.IndexByte(src[pos:], '{'); i >= 0; {
		j := pos + i
		if j+1 < len(src) && (src[j+1] == '{' || src[j+1] == '%' || src[j+1] == '#') {
			return j
		}
		pos = j + 1
		i = strings.IndexByte(src[pos:], '{')
	}
	return -1
}

// lstrip applies a tag's left-side whitespace control to the text before
// it: "-" strips all whitespace; otherwise, for a block or comment tag not
// marked "+", lstrip_blocks strips the spaces between the line's start
// and the tag when nothing else is there.
func lstrip(text string, sign byte, kind tagKind, lineStarting bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, isSpace)
	}
	if sign == '+' || kind == varTag {
		return text
	}
	l := strings.LastIndexByte(text, '\n') + 1
	if (l > 0 || lineStarting) && l < len(text) && strings.TrimLeftFunc(text[l:], isSpace) == "" {
		return text[:l]
	}
	return text
}

// findCloser returns where the tag whose content starts at i ends: the
// index of its closing sign or closer, and the sign ('-', '+' or 0).
// Quoted strings in expressions and statements may hold the closer.
func findCloser(src string, i int, kind tagKind) (int, byte, error) {
	closer := map[tagKind]string{varTag: "}}", blockTag: "%}", commentTag: "#}"}[kind]
	start := i
	for i < len(src) {
		c := src[i]
		if kind != commentTag && (c == '\'' || c == '"') {
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
			continue
		}
		if strings.HasPrefix(src[i:], closer) {
			return i, 0, nil
		}
		if (c == '-' || c == '+' && kind != varTag) && strings.HasPrefix(src[i+1:], closer) {
			return i, c, nil
		}
		i++
	}
	return 0, 0, fmt.Errorf("chat template: the tag opened at byte %d has no closing %q", start-2, closer)
}

// isKeyword reports whether a block tag's content is the statement word
// alone.
func isKeyword(inner, word string) bool { return strings.TrimFunc(inner, isSpace) == word }

// rawBlock reads the content of a raw block starting at i up to its
// endraw tag, with that tag's left-side whitespace control applied, and
// returns it and where the text after the endraw tag starts.
func rawBlock(src string, i int) (string, int, error) {
	for j := i; ; {
		k := strings.Index(src[j:], "{%")
		if k < 0 {
			return "", 0, fmt.Errorf("chat template: {%% raw %%} at byte %d has no {%% endraw %%}", i)
		}
		k += j
		innerStart := k + 2
		sign := byte(0)
		if innerStart < len(src) && (src[innerStart] == '-' || src[innerStart] == '+') {
			sign = src[innerStart]
			innerStart++
		}
		innerEnd, closeSign, err := findCloser(src, innerStart, blockTag)
		if err != nil || !isKeyword(src[innerStart:innerEnd], "endraw") {
			j = k + 2
			continue
		}
		lineStarting := i > 0 && src[i-1] == '\n'
		content := lstrip(src[i:k], sign, blockTag, lineStarting)
		end := innerEnd + 2
		if closeSign != 0 {
			end++
		}
		switch {
		case closeSign == '-':
			end = skipSpace(src, end)
		case closeSign == 0 && end < len(src) && src[end] == '\n':
			end++
		}
		return content, end, nil
	}
}

// writeText writes text data, its leading and trailing spaces, tabs and
// newlines as string expressions, and a final "{" too, which the next tag
// would otherwise turn into an opener once the whitespace between them
// is stripped.
func writeText(out *strings.Builder, text string) {
	edge := func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' }
	mid := strings.TrimLeftFunc(text, edge)
	lead := text[:len(text)-len(mid)]
	core := strings.TrimRightFunc(mid, edge)
	trail := mid[len(core):]
	if strings.HasSuffix(core, "{") {
		core, trail = core[:len(core)-1], "{"+trail
	}
	writeLiteral(out, lead)
	out.WriteString(core)
	writeLiteral(out, trail)
}

// writeLiteral writes s as an expression printing it, or nothing for "".
func writeLiteral(out *strings.Builder, s string) {
	if s == "" {
		return
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	out.WriteString(`{{ "` + r.Replace(s) + `" }}`)
}
