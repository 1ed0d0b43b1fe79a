package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// Metrics is one logged step: a line of metrics.jsonl and what progress
// displays show.
type Metrics struct {
	Step int `json:"step"` // optimizer updates completed
	// Loss is the training objective, the cross-entropy plus, when the
	// model's z_loss is above 0, the z-loss term, averaged over the
	// updates since the previous line, each weighted by the tokens it
	// counted (step.State.IntervalLoss).
	Loss float64 `json:"loss"`
	// LossLast is the objective of the line's last update alone.
	LossLast float64 `json:"loss_last,omitempty"`
	// CountedTokens is, for a fine-tune, the loss-weighted targets that
	// Loss averages over (the tokens since the previous line that count).
	CountedTokens float64 `json:"counted_tokens,omitempty"`
	// CountedRows is, for an objective whose loss averages rows
	// (RowInputs: a preference objective's pairs), the weighted rows Loss
	// and Aux average over since the previous line.
	CountedRows float64 `json:"counted_rows,omitempty"`
	// Aux are the means of the step's auxiliary metrics (step.Layout.Aux: a
	// preference objective's rewards, margin and accuracy) since the
	// previous line, weighted as Loss is.
	Aux map[string]float64 `json:"aux,omitempty"`
	// ValLoss is the held-out cross-entropy, without the z-loss term that
	// Loss includes when the model's z_loss is above 0.
	ValLoss *float64 `json:"val_loss,omitempty"`
	// ValZLoss is the z-loss term on the held-out tokens, z_loss ×
	// mean(logsumexp²); absent when z_loss is 0.
	ValZLoss *float64 `json:"val_z_loss,omitempty"`
	// ValTokens is the number of held-out tokens the evaluation covered,
	// ValRows the held-out rows of an objective that averages rows (a
	// preference objective's pairs), and ValAux the means of its metrics
	// there (Eval).
	ValTokens int                `json:"val_tokens,omitempty"`
	ValRows   int                `json:"val_rows,omitempty"`
	ValAux    map[string]float64 `json:"val_aux,omitempty"`
	LR        float64            `json:"lr"`
	GradNorm  float64            `json:"grad_norm"`
	StepsPerS float64            `json:"steps_per_s"`
	// TokensPerS counts every position of the updates' rows since the
	// previous line; in a fine-tune that includes padding and the masked
	// prompts, which CountedTokensPerS leaves out.
	TokensPerS float64 `json:"tokens_per_s"`
	// CountedTokensPerS is, for a fine-tune, CountedTokens per second: the
	// targets it trained on (mlx-lm's "trained tokens").
	CountedTokensPerS float64 `json:"counted_tokens_per_s,omitempty"`
	ElapsedS          float64 `json:"elapsed_s"`
	// PeakMemoryBytes is MLX's peak memory since the run started.
	PeakMemoryBytes uint64 `json:"peak_memory_bytes,omitempty"`
	// MicroBatch and AccumSteps are the plan the update ran under: a
	// resumed run may run another.
	MicroBatch int `json:"micro_batch,omitempty"`
	AccumSteps int `json:"accum_steps,omitempty"`
}

// MetricsFile is the name of the metrics log inside a run folder.
const MetricsFile = "metrics.jsonl"

// ReadMetrics reads a metrics.jsonl file.
func ReadMetrics(path string) ([]Metrics, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Metrics
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var m Metrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return out, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out = append(out, m)
	}
	return out, sc.Err()
}
