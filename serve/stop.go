package serve

import "strings"

// stopper applies a request's stop strings to text as it streams in: text
// that may be the start of a stop string is held back until the next
// piece says whether it is, so no client ever sees any part of a stop
// string, and the text up to the first one is all that is released.
type stopper struct {
	stops []string
	held  string
	done  bool
}

// add takes the next piece of generated text and returns what can be
// released; stopped says a stop string was met (nothing after it counts).
func (s *stopper) add(piece string) (release string, stopped bool) {
	if s.done {
		return "", true
	}
	s.held += piece
	if len(s.stops) == 0 {
		release, s.held = s.held, ""
		return release, false
	}
	first := -1
	for _, stop := range s.stops {
		if i := strings.Index(s.held, stop); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		release, s.held, s.done = s.held[:first], "", true
		return release, true
	}
	keep := 0
	for _, stop := range s.stops {
		keep = max(keep, overlap(s.held, stop))
	}
	release, s.held = s.held[:len(s.held)-keep], s.held[len(s.held)-keep:]
	return release, false
}

// flush releases what is held back once generation has ended without
// meeting a stop string.
func (s *stopper) flush() string {
	if s.done {
		return ""
	}
	out := s.held
	s.held = ""
	return out
}

// overlap is the length of the longest suffix of text that is a proper
// prefix of stop.
func overlap(text, stop string) int {
	for n := min(len(text), len(stop)-1); n > 0; n-- {
		if strings.HasSuffix(text, stop[:n]) {
			return n
		}
	}
	return 0
}
