package finetune

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/posttrainllm/posttrainllm/checkpoint"
	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/mlx"
	"github.com/posttrainllm/posttrainllm/train"
)

// ReferenceFile is where a full preference fine-tune keeps the reference
// model's log-probabilities in its run folder: computed once before the
// first update, read again on resume.
const ReferenceFile = "reference_logprobs.json"

// ReferenceLogProbs returns the sequence log-probability (SequenceLogProbs)
// of every row of rows under the model terms computes with params: one
// forward pass over the rows, in batches of batch rows (the last padded
// with rows that count nothing), compiled when compile is set. A full
// preference fine-tune runs it once with the base weights, before they
// change, and feeds the values to its step as a row input.
func ReferenceLogProbs(terms train.TokenLossFunc, params []*mlx.Array, rows *data.Rows, batch int, compile bool) ([]float32, error) {
	if batch < 1 {
		return nil, fmt.Errorf("reference: batch %d, want >= 1", batch)
	}
	out := make([]float32, 0, rows.Len())
	err := mlx.Do(func() error {
		body := func(in []*mlx.Array) ([]*mlx.Array, error) {
			n := len(in) - 3
			ce, _ := terms(in[:n], in[n], in[n+1])
			logp, _ := SequenceLogProbs(ce, in[n+2])
			return []*mlx.Array{logp}, nil
		}
		call := func(in []*mlx.Array) ([]*mlx.Array, error) { return body(in) }
		if compile {
			fn, err := mlx.Compile(body)
			if err != nil {
				return fmt.Errorf("reference: compiling: %w", err)
			}
			defer fn.Free()
			call = func(in []*mlx.Array) ([]*mlx.Array, error) { return fn.Call(in...) }
		}
		T := rows.T
		x, y, w := make([]int32, batch*T), make([]int32, batch*T), make([]float32, batch*T)
		for lo := 0; lo < rows.Len(); lo += batch {
			n := min(batch, rows.Len()-lo)
			clear(x)
			clear(y)
			clear(w)
			copy(x, rows.X[lo*T:(lo+n)*T])
			copy(y, rows.Y[lo*T:(lo+n)*T])
			copy(w, rows.W[lo*T:(lo+n)*T])
			if err := func() error {
				sc := mlx.NewScope()
				defer sc.Close()
				in := append(append([]*mlx.Array{}, params...), mlx.FromSlice(x, batch, T), mlx.FromSlice(y, batch, T), mlx.FromSlice(w, batch, T))
				res, err := call(in)
				if err != nil {
					return err
				}
				v, err := res[0].Float32s()
				if err != nil {
					return err
				}
				out = append(out, v[:n]...)
				return nil
			}(); err != nil {
				return fmt.Errorf("reference: rows %d to %d: %w", lo, lo+n-1, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("reference: row %d has log-probability %g, want a finite value", i, v)
		}
	}
	return out, nil
}

// References are the reference log-probabilities of a full preference
// fine-tune's training and validation rows (ReferenceLogProbs), with the
// fingerprints of the rows and base they were computed for, so that a
// resumed run reuses them only for the same data and base.
type References struct {
	Base      string    `json:"base"`
	TrainRows string    `json:"train_rows"` // RowsFingerprint of the training rows
	ValidRows string    `json:"valid_rows,omitempty"`
	Train     []float32 `json:"train"`
	Valid     []float32 `json:"valid,omitempty"`
}

// RowsFingerprint is a hex SHA-256 of rows' tokens, targets and weights:
// what identifies the rows reference values belong to.
func RowsFingerprint(rows *data.Rows) string {
	if rows == nil {
		return ""
	}
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(rows.T))
	h.Write(b[:])
	for i := range rows.X {
		binary.LittleEndian.PutUint32(b[:4], uint32(rows.X[i]))
		binary.LittleEndian.PutUint32(b[4:], uint32(rows.Y[i]))
		h.Write(b[:])
		binary.LittleEndian.PutUint32(b[:4], math.Float32bits(rows.W[i]))
		h.Write(b[:4])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// WriteReferences writes refs into run folder dir (ReferenceFile),
// through a temporary file fsynced before it is renamed into place, and
// fsyncs the folder after, so a crash leaves either no file or the whole
// one.
func WriteReferences(dir string, refs References) error {
	b, err := json.Marshal(refs)
	if err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	path := filepath.Join(dir, ReferenceFile)
	tmp := path + ".tmp"
	if err := checkpoint.WriteFileSync(tmp, b); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	if err := checkpoint.SyncPath(dir); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	return nil
}

// ReadReferences reads the reference values of run folder dir and checks
// them against what the run would compute: want's base and row
// fingerprints, and one value per row. A missing file is os.ErrNotExist
// (wrapped); a file for other rows or another base is an error saying so.
func ReadReferences(dir string, want References, train, valid *data.Rows) (References, error) {
	path := filepath.Join(dir, ReferenceFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return References{}, fmt.Errorf("reference: %w", err)
	}
	var refs References
	if err := json.Unmarshal(b, &refs); err != nil {
		return References{}, fmt.Errorf("reference: %s: %w", path, err)
	}
	switch {
	case refs.Base != want.Base:
		return References{}, fmt.Errorf("reference: %s was computed with base %s, this run's base is %s", path, refs.Base, want.Base)
	case refs.TrainRows != want.TrainRows || refs.ValidRows != want.ValidRows:
		return References{}, fmt.Errorf("reference: %s was computed for other training or validation rows than this run's", path)
	case len(refs.Train) != train.Len() || (valid != nil && len(refs.Valid) != valid.Len()):
		return References{}, fmt.Errorf("reference: %s holds %d and %d values, the rows are %d and %d", path, len(refs.Train), len(refs.Valid), train.Len(), rowsLen(valid))
	}
	return refs, nil
}

// rowsLen is rows.Len(), 0 for nil rows.
func rowsLen(rows *data.Rows) int {
	if rows == nil {
		return 0
	}
	return rows.Len()
}
