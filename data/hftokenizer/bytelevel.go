package hftokenizer

import "unicode/utf8"

// byteRunes maps each byte to the printable character GPT-2's byte-level
// BPE writes it as (bytes_to_unicode): printable Latin-1 bytes stand for
// themselves and the others for U+0100 upwards, in byte order.
var byteRunes [256]rune

// runeBytes is byteRunes' inverse, for the decoder.
var runeBytes = map[rune]byte{}

func init() {
	n := 0
	for b := range 256 {
		switch {
		case '!' <= b && b <= '~', 0xA1 <= b && b <= 0xAC, 0xAE <= b && b <= 0xFF:
			byteRunes[b] = rune(b)
		default:
			byteRunes[b] = rune(256 + n)
			n++
		}
		runeBytes[byteRunes[b]] = byte(b)
	}
}

// byteLevelPattern is the GPT-2 pattern ByteLevel splits with when
// use_regex is set.
const byteLevelPattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevel is the ByteLevel pre-tokenizer: an optional space before each
// piece, an optional split with byteLevelPattern, then every byte written
// as its byteRunes character.
type byteLevel struct {
	addPrefixSpace bool
	useRegex       bool
}

// preTokenize applies the pre-tokenizer to pieces.
func (b byteLevel) preTokenize(pieces []piece) []piece {
	out := make([]piece, 0, len(pieces))
	for _, p := range pieces {
		text := p.text
		if b.addPrefixSpace && (len(text) == 0 || text[0] != ' ') {
			text = " " + text
		}
		if !b.useRegex {
			out = append(out, piece{text: byteLevelEncode(text), atStart: p.atStart})
			continue
		}
		for i := 0; i < len(text); {
			end := gpt2PieceEnd(text, i)
			out = append(out, piece{text: byteLevelEncode(text[i:end]), atStart: p.atStart && i == 0})
			i = end
		}
	}
	return out
}

// byteLevelEncode writes every byte of s as its byteRunes character.
func byteLevelEncode(s string) string {
	buf := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, byteRunes[s[i]])
	}
	return string(buf)
}

// byteLevelDecoder is the ByteLevel decoder: the tokens' characters back
// to bytes, read as UTF-8 with invalid sequences replaced. A token with a
// character outside the byte map (an added token such as "<|im_start|>"
// is made of mapped characters, but not every added token is) keeps its
// own UTF-8 bytes.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		start := len(buf)
		mapped := true
		for _, r := range t {
			b, ok := runeBytes[r]
			if !ok {
				mapped = false
				break
			}
			buf = append(buf, b)
		}
		if !mapped {
			buf = append(buf[:start], t...)
		}
	}
	return []string{utf8Lossy(buf)}
}

// utf8Lossy returns b as a string with each maximal invalid subsequence
// replaced by one U+FFFD, as Rust's String::from_utf8_lossy does (Go's
// decoder would write one U+FFFD per byte of a truncated sequence).
func utf8Lossy(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = utf8.AppendRune(out, utf8.RuneError)
		i += invalidPrefix(b[i:])
	}
	return string(out)
}

// invalidPrefix returns the length of the maximal subpart of an ill-formed
// sequence at the start of b (Unicode's "substitution of maximal
// subparts"): a lead byte and as many following bytes as could still
// continue it, or 1.
func invalidPrefix(b []byte) int {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead >= 0xE1 && lead <= 0xEC, lead == 0xEE, lead == 0xEF:
		need = 2
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	case lead == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(b); n++ {
		c := b[n]
		if c < lo || c > hi {
			break
		}
		lo, hi = 0x80, 0xBF
	}
	return n
}
