package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
)

// ShardPaths returns the token shards a pattern names, sorted: every *.bin
// file directly in a directory, or the files a glob such as
// "data/fineweb_train_*.bin" matches. It fails when nothing matches, so a
// typo is not a silently empty corpus.
func ShardPaths(pattern string) ([]string, error) {
	glob := pattern
	if st, err := os.Stat(pattern); err == nil && st.IsDir() {
		glob = filepath.Join(pattern, "*.bin")
	}
	paths, err := filepath.Glob(glob)
	if err != nil {
		return nil, fmt.Errorf("token shards %q: %w", pattern, err)
	}
	files := paths[:0]
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			files = append(files, p)
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("token shards %q: no files match, want a directory of .bin shards or a glob such as 'dir/*_train_*.bin'", pattern)
	}
	slices.Sort(files)
	return files, nil
}

// OpenShards memory-maps the token shards at paths, in order, checks that
// every id is below vocabSize, and returns them as one Tokens, the shards
// concatenated. The check reads every shard once, on all CPUs; after it
// the operating system pages tokens in and out as windows are drawn, so
// the shards may be far larger than memory. The caller must Close the
// result.
func OpenShards(paths []string, vocabSize int) (*Tokens, error) {
	if len(paths) == 0 {
		return nil, errors.New("token shards: no paths")
	}
	if vocabSize < 1 {
		return nil, fmt.Errorf("token shards: vocabulary size %d, want at least 1", vocabSize)
	}
	parts := make([]*Tokens, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), len(paths)) {
		wg.Go(func() {
			for i := range next {
				parts[i], errs[i] = openCheckedShard(paths[i], vocabSize)
			}
		})
	}
	for i := range paths {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range parts {
			if p != nil {
				p.Close()
			}
		}
		return nil, err
	}
	return ConcatTokens(parts), nil
}

// openCheckedShard opens the shard at path and checks its ids against
// vocabSize.
func openCheckedShard(path string, vocabSize int) (*Tokens, error) {
	t, err := OpenShard(path)
	if err != nil {
		return nil, err
	}
	if i, id := firstOutside(t, vocabSize); i >= 0 {
		t.Close()
		return nil, fmt.Errorf("token shard %q: token %d at index %d is outside the vocabulary [0,%d) (a shard of another tokenizer?)",
			path, id, i, vocabSize)
	}
	return t, nil
}

// firstOutside returns the index and value of the first id of t at or
// above vocabSize, or -1.
func firstOutside(t *Tokens, vocabSize int) (int, int64) {
	v := uint32(min(int64(vocabSize), 1<<32-1))
	if t.info.Width == 2 {
		if vocabSize > 1<<16 {
			return -1, 0
		}
		for i := 0; i < t.n; i++ {
			if id := uint32(binary.LittleEndian.Uint16(t.payload[2*i:])); id >= v {
				return i, int64(id)
			}
		}
		return -1, 0
	}
	for i := 0; i < t.n; i++ {
		if id := binary.LittleEndian.Uint32(t.payload[4*i:]); id >= v || id > 1<<31-1 {
			return i, int64(id)
		}
	}
	return -1, 0
}

// ConcatTokens returns Tokens that read parts one after another, without
// copying; closing it closes every part. Its Info has the widest part's
// Width and the total Count.
func ConcatTokens(parts []*Tokens) *Tokens {
	t := &Tokens{parts: parts, ends: make([]int, len(parts))}
	var paths []string
	for k, p := range parts {
		t.n += p.n
		t.ends[k] = t.n
		t.info.Width = max(t.info.Width, p.info.Width)
		paths = append(paths, p.path)
	}
	t.info.Count = t.n
	t.path = strings.Join(paths, string(os.PathListSeparator))
	return t
}

// Parts returns the shards t concatenates, or t alone if it is one file.
func (t *Tokens) Parts() []*Tokens {
	if t.parts == nil {
		return []*Tokens{t}
	}
	return slices.Clone(t.parts)
}

// partOf returns the part holding index i.
func (t *Tokens) partOf(i int) int {
	return sort.SearchInts(t.ends, i+1)
}

// partStart returns the index of part k's first token.
func (t *Tokens) partStart(k int) int {
	if k == 0 {
		return 0
	}
	return t.ends[k-1]
}

// copyFromParts is CopyInto across part boundaries.
func (t *Tokens) copyFromParts(dst []int32, start int) {
	for len(dst) > 0 {
		k := t.partOf(start)
		off := start - t.partStart(k)
		n := min(len(dst), t.parts[k].n-off)
		t.parts[k].CopyInto(dst[:n], off)
		dst, start = dst[n:], start+n
	}
}

// closeParts closes every part.
func (t *Tokens) closeParts() error {
	parts := t.parts
	t.parts, t.ends, t.n = nil, nil, 0
	var errs []error
	for _, p := range parts {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
