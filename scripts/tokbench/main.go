// Command tokbench is the Go half of scripts/bpe-dropout-bench.sh: it
// writes GPT-2's vocabulary and merges in Hugging Face's format (derived
// from the ranks posttrainllm encodes with), writes the benchmark texts,
// and times posttrainllm's GPT-2 encodings of them.
//
//	go run ./scripts/tokbench -out DIR [-bytes N] [-rounds R]
//
// DIR receives vocab.json, merges.txt, texts.json (the documents) and
// go.json (ids with p = 0 and tokens per second of each encoding).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tiktoken-go/tokenizer/codec"

	"github.com/posttrainllm/posttrainllm/data"
)

func main() {
	out := flag.String("out", "", "folder for vocab.json, merges.txt, texts.json and go.json")
	maxBytes := flag.Int64("bytes", 8<<20, "bytes of text (Go standard library sources) to encode")
	rounds := flag.Int("rounds", 3, "timed rounds per encoding; the fastest counts")
	flag.Parse()
	if *out == "" {
		log.Fatal("tokbench: -out is required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	tok, err := data.NewTokenizer("gpt2")
	if err != nil {
		log.Fatal(err)
	}
	if err := writeHFModel(*out, tok); err != nil {
		log.Fatal(err)
	}
	texts, err := benchTexts(*maxBytes)
	if err != nil {
		log.Fatal(err)
	}
	if err := writeJSON(filepath.Join(*out, "texts.json"), texts); err != nil {
		log.Fatal(err)
	}
	res, err := timeEncodings(tok, texts, *rounds)
	if err != nil {
		log.Fatal(err)
	}
	if err := writeJSON(filepath.Join(*out, "go.json"), res); err != nil {
		log.Fatal(err)
	}
}

// benchTexts returns the files of the default corpus, one document each,
// up to maxBytes.
func benchTexts(maxBytes int64) ([]string, error) {
	dir, err := data.DefaultCorpus()
	if err != nil {
		return nil, err
	}
	c, err := data.LoadCorpusWith(dir, data.CorpusOptions{Extensions: []string{".go"}, ExcludeTests: true, MaxBytes: maxBytes})
	if err != nil {
		return nil, err
	}
	var texts []string
	for _, f := range c.Files {
		b, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, err
		}
		texts = append(texts, string(b))
	}
	return texts, nil
}

// result is go.json.
type result struct {
	Bytes   int              `json:"bytes"`
	Docs    int              `json:"docs"`
	Threads int              `json:"threads"`
	Rates   map[string]rate  `json:"rates"`
	IDs     [][]int32        `json:"ids_p0"`
	Tokens  map[string]int64 `json:"tokens"`
}

// rate is one encoding's speed.
type rate struct {
	Seconds      float64 `json:"seconds"`
	TokensPerSec float64 `json:"tokens_per_s"`
	MBPerSec     float64 `json:"mb_per_s"`
}

// timeEncodings times the tiktoken-go codec, posttrainllm's gpt2
// tokenizer (documents encoded in parallel) and BPEDropout at p = 0 and
// p = 0.1 (EncodeBatch), each the fastest of rounds.
func timeEncodings(tok data.Tokenizer, texts []string, rounds int) (result, error) {
	res := result{Docs: len(texts), Threads: runtime.GOMAXPROCS(0), Rates: map[string]rate{}, Tokens: map[string]int64{}}
	for _, t := range texts {
		res.Bytes += len(t)
	}
	seeds := make([]uint64, len(texts))
	for i := range seeds {
		seeds[i] = uint64(i) + 1
	}
	cdc := codec.NewR50kBase()
	codecEncode := func(text string) []int32 {
		raw, _, err := cdc.Encode(text)
		if err != nil {
			log.Fatalf("tokbench: tiktoken-go codec: %v", err)
		}
		ids := make([]int32, len(raw))
		for i, id := range raw {
			ids[i] = int32(id)
		}
		return ids
	}
	encoders := map[string]func() [][]int32{
		"tiktoken-go codec":        func() [][]int32 { return parallel(texts, codecEncode) },
		"posttrainllm gpt2 Encode": func() [][]int32 { return parallel(texts, tok.Encode) },
	}
	for _, p := range []float64{0, 0.1} {
		b, err := data.NewBPEDropout(p)
		if err != nil {
			return res, err
		}
		encoders[fmt.Sprintf("posttrainllm BPEDropout p=%g", p)] = func() [][]int32 { return b.EncodeBatch(texts, seeds) }
	}
	names := make([]string, 0, len(encoders))
	for name := range encoders {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		best := time.Duration(1<<63 - 1)
		var ids [][]int32
		for range rounds {
			start := time.Now()
			ids = encoders[name]()
			best = min(best, time.Since(start))
		}
		n := int64(0)
		for _, d := range ids {
			n += int64(len(d))
		}
		res.Tokens[name] = n
		s := best.Seconds()
		res.Rates[name] = rate{Seconds: s, TokensPerSec: float64(n) / s, MBPerSec: float64(res.Bytes) / s / 1e6}
		if strings.HasSuffix(name, "p=0") {
			res.IDs = ids
		}
	}
	return res, nil
}

// parallel applies enc to every text on all CPUs.
func parallel(texts []string, enc func(string) []int32) [][]int32 {
	out := make([][]int32, len(texts))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				out[i] = enc(texts[i])
			}
		})
	}
	for i := range texts {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// writeHFModel writes vocab.json and merges.txt, GPT-2's byte-level BPE in
// Hugging Face's format, derived from the ranks: the merge that forms a
// token is the last one that byte-pair merging by rank, restricted to
// lower ranks, applies to its bytes.
func writeHFModel(dir string, tok data.Tokenizer) error {
	n := tok.VocabSize() - 1 // without <|endoftext|>
	tokens := make([]string, n)
	ranks := make(map[string]int, n)
	for id := range n {
		tokens[id] = tok.Decode([]int32{int32(id)})
		ranks[tokens[id]] = id
	}
	enc := byteEncoder()
	vocab := make(map[string]int, n+1)
	for id, t := range tokens {
		vocab[hfString(enc, t)] = id
	}
	vocab["<|endoftext|>"] = n
	var merges strings.Builder
	merges.WriteString("#version: 0.2\n")
	for id, t := range tokens {
		if len(t) < 2 {
			continue
		}
		parts := mergeBelow(t, ranks, id)
		if len(parts) != 2 {
			return fmt.Errorf("token %d %q does not split into one merge of lower-ranked tokens (%d parts)", id, t, len(parts))
		}
		fmt.Fprintf(&merges, "%s %s\n", hfString(enc, parts[0]), hfString(enc, parts[1]))
	}
	if err := writeJSON(filepath.Join(dir, "vocab.json"), vocab); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "merges.txt"), []byte(merges.String()), 0o644)
}

// mergeBelow merges the bytes of t by rank, using only tokens ranked
// below maxRank, and returns the parts it ends with.
func mergeBelow(t string, ranks map[string]int, maxRank int) []string {
	parts := make([]string, len(t))
	for i := 0; i < len(t); i++ { // bytes, not runes
		parts[i] = t[i : i+1]
	}
	for {
		best, bestRank := -1, maxRank
		for i := 0; i+1 < len(parts); i++ {
			if r, ok := ranks[parts[i]+parts[i+1]]; ok && r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			return parts
		}
		parts[best] += parts[best+1]
		parts = append(parts[:best+1], parts[best+2:]...)
	}
}

// byteEncoder is GPT-2's bytes_to_unicode: printable bytes map to
// themselves, the others to code points from 256 up.
func byteEncoder() [256]rune {
	var enc [256]rune
	next := rune(256)
	for b := range 256 {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			enc[b] = rune(b)
		} else {
			enc[b] = next
			next++
		}
	}
	return enc
}

// hfString writes the bytes of t with GPT-2's byte-to-character map.
func hfString(enc [256]rune, t string) string {
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		b.WriteRune(enc[t[i]])
	}
	return b.String()
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
