package generate

import (
	"strings"
	"unicode/utf8"

	"github.com/posttrainllm/posttrainllm/data"
)

// textStream turns generated ids into text as they come: it decodes the
// completion so far and hands on what is new, holding back an incomplete
// UTF-8 character (decoded as U+FFFD until its last byte comes) and any
// ending that could be the start of a stop string, and it ends the text
// before the first stop string generated.
type textStream struct {
	tok    data.Tokenizer
	stops  []string
	onText func(delta string) error
	ids    []int32
	text   string // the completion's text, cut before a stop string
	sent   int    // bytes of text handed on
}

// push adds id; it returns ErrStop once the text holds a stop string.
func (s *textStream) push(id int32) error {
	s.ids = append(s.ids, id)
	full := s.tok.Decode(s.ids)
	cut := -1
	for _, stop := range s.stops {
		if i := strings.Index(full, stop); stop != "" && i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		s.text = full[:cut]
		if err := s.flush(len(s.text)); err != nil {
			return err
		}
		return ErrStop
	}
	s.text = full
	safe := len(s.text)
	for safe > 0 {
		r, size := utf8.DecodeLastRuneInString(s.text[:safe])
		if r != utf8.RuneError || size != 3 && size != 1 {
			break
		}
		safe -= size
	}
	for _, stop := range s.stops {
		for k := min(len(stop)-1, safe); k > 0; k-- {
			if strings.HasSuffix(s.text[:safe], stop[:k]) {
				safe -= k
				break
			}
		}
	}
	return s.flush(safe)
}

// flush hands on the text up to byte end that has not been handed on.
func (s *textStream) flush(end int) error {
	if end <= s.sent || s.onText == nil {
		s.sent = max(s.sent, end)
		return nil
	}
	delta := s.text[s.sent:end]
	s.sent = end
	return s.onText(delta)
}

// finish hands on the rest of the text (generation has ended, so nothing
// is held back) and returns the whole.
func (s *textStream) finish() (string, error) {
	return s.text, s.flush(len(s.text))
}
