package data

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
)

// maxJSONLLine is the longest line ReadJSONL accepts.
const maxJSONLLine = 256 << 20

// ReadJSONL calls fn with the string field of each JSON object of the
// JSON-lines file at path, in order, skipping blank lines: the layout of
// FineWeb, The Stack and most web-text dumps ({"text": "..."} per line). A
// line that is not an object with a string field fails, naming the line.
func ReadJSONL(path, field string, fn func(text string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), maxJSONLLine)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("jsonl %q line %d: %v, want one JSON object per line", path, line, err)
		}
		raw, ok := obj[field]
		if !ok {
			return fmt.Errorf("jsonl %q line %d: no %q field", path, line, field)
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return fmt.Errorf("jsonl %q line %d: field %q is %.40s, want a string", path, line, field, raw)
		}
		if err := fn(text); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("jsonl %q: %w (lines are limited to %d MiB)", path, err, maxJSONLLine>>20)
	}
	return nil
}

// EncodeDocuments encodes each document on all CPUs and returns the ids of
// each with the tokenizer's EOT in front, the layout of llm.c's shards:
// every document starts with <|endoftext|>, so the model learns where
// documents begin.
func EncodeDocuments(tok Tokenizer, docs []string) [][]int32 {
	out := make([][]int32, len(docs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(docs)) {
		wg.Go(func() {
			for i := range next {
				out[i] = append([]int32{tok.EOT()}, tok.Encode(docs[i])...)
			}
		})
	}
	for i := range docs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
