package data

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxRecordLine bounds one jsonl line (64 MiB), so a file without line
// breaks is refused rather than read whole into one buffer.
const maxRecordLine = 64 << 20

// ParseJSONL reads one JSON object per line of r, blank lines skipped,
// decoding each with parse (given the line and its 1-based number). name
// labels errors, which name the line; want says what a record holds, for
// the error of an input without any. Lines are bounded (64 MiB), so a
// file without line breaks is refused rather than read whole. The record
// readers of this package and of others (online RL's prompts) share it.
func ParseJSONL[T any](r io.Reader, name, want string, parse func(b []byte, line int) (T, error)) ([]T, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxRecordLine)
	var out []T
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, err := parse(b, line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d MiB", name, line+1, maxRecordLine>>20)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no records; want one JSON object per line with %s", name, want)
	}
	return out, nil
}
