package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/posttrainllm/posttrainllm/data"
	"github.com/posttrainllm/posttrainllm/model"
	"github.com/posttrainllm/posttrainllm/optim"
)

// Config is everything that defines a training run. It is what presets fill
// in, flags override, and checkpoints store (state.json), so a resumed run
// continues with the same settings.
type Config struct {
	Model model.Config `json:"model"`

	Tokenizer   string  `json:"tokenizer"`    // "byte", "gpt2" or "hf" (HFTokenizer)
	Corpus      string  `json:"corpus"`       // file or directory; "" means the default corpus
	ValFraction float64 `json:"val_fraction"` // tail of the token stream held out for evaluation
	// Data names llm.c token shards to train on instead of Corpus: a
	// directory of .bin files or a glob (pretrain.OpenShardDataset); ValData the
	// held-out shards, by default the last shard of Data.
	Data    string `json:"data,omitempty"`
	ValData string `json:"val_data,omitempty"`
	// BPEDropout, when above 0, re-tokenises every training window with
	// GPT-2 BPE-dropout at this probability (data.BPEDropout); gpt2 only.
	BPEDropout float64 `json:"bpe_dropout,omitempty"`

	Steps int `json:"steps"` // optimizer updates
	// Batch × Accum sequences make one optimizer update: the batch is
	// that of one microbatch of Accum accumulated ones. How they run, how
	// many sequences per forward pass, is the Plan's choice (MicroBatch).
	Batch int `json:"batch"` // sequences per microbatch
	Accum int `json:"accum"` // microbatches per update
	// MicroBatch is how many sequences one forward pass runs, a divisor of
	// Batch × Accum; 0 is auto (ChoosePlan: the batch on the CPU, the
	// largest that fits MemoryBudget on a GPU). It changes how an update
	// runs, not what it computes, so a checkpoint resumes under any.
	MicroBatch int `json:"micro_batch,omitempty"`
	// MemoryBudget is the peak memory an automatically planned step may
	// use, and MLX's memory limit while the run is open (LimitMemory):
	// bytes with a unit ("80GiB") or a fraction of the device's memory
	// ("0.8"); "" is DefaultMemoryFraction (ParseMemoryBudget).
	MemoryBudget string `json:"memory_budget,omitempty"`
	// PlanCache is the folder where a probed plan is kept for later runs
	// of the same step on the same device (PlanCacheDir is the user's);
	// "" probes every time. It is this machine's, not the run's, so a
	// run's saved config leaves it out.
	PlanCache string `json:"-"`

	Optimizer string `json:"optimizer"` // adamw, lion, adafactor, muon, sgd, galore, sophia
	// GaLore's rank, refresh gap (updates) and scale; 0 takes
	// optim.DefaultGaLoreConfig's. Used only with optimizer galore.
	GaLoreRank  int     `json:"galore_rank,omitempty"`
	GaLoreGap   int     `json:"galore_gap,omitempty"`
	GaLoreScale float64 `json:"galore_scale,omitempty"`
	// Sophia's Hessian-estimate interval (updates) and ρ; 0 takes
	// optim.DefaultSophiaConfig's. Used only with optimizer sophia.
	SophiaEvery int     `json:"sophia_every,omitempty"`
	SophiaRho   float64 `json:"sophia_rho,omitempty"`
	// WeightDecay overrides the optimizer's default weight decay when set.
	WeightDecay   *float64 `json:"weight_decay,omitempty"`
	GradClip      float64  `json:"grad_clip"`      // global norm; 0 disables
	Schedule      string   `json:"schedule"`       // constant, cosine, wsd
	LR            float64  `json:"lr"`             // peak learning rate
	MinLR         float64  `json:"min_lr"`         // floor of cosine and wsd
	Warmup        int      `json:"warmup"`         // warm-up updates
	DecayFraction float64  `json:"decay_fraction"` // wsd: share of steps spent decaying

	Compile bool   `json:"compile"`
	Device  string `json:"device"` // cpu or gpu
	Seed    uint64 `json:"seed"`

	LogEvery        int `json:"log_every"`        // read the loss back every N updates
	EvalEvery       int `json:"eval_every"`       // held-out loss every N updates; 0 disables
	EvalTokens      int `json:"eval_tokens"`      // held-out tokens per evaluation, at least (see EvalBatches)
	CheckpointEvery int `json:"checkpoint_every"` // 0: only at the end
	KeepCheckpoints int `json:"keep_checkpoints"` // newest checkpoints kept
	// KeepBest keeps, besides the newest checkpoints, the one of the
	// lowest held-out loss so far in RUN/best (checkpoint.BestRoot),
	// the run's starting weights included.
	KeepBest bool `json:"keep_best,omitempty"`
	// Patience stops the run early, with a checkpoint, once the held-out
	// loss has not improved for this many evaluations in a row; 0 runs
	// every step.
	Patience      int `json:"patience,omitempty"`
	PrefetchDepth int `json:"prefetch_depth"`
	// Windows is where each update's token windows are made: "device"
	// gathers them on the device from the training corpus held there
	// (step.TokenStream), "host" copies them from the host as step.Batch.X and
	// Y, "" or "auto" is device on a GPU and host on the CPU
	// (WindowSource, which also says when only the host can). Both train
	// on the same windows; on a CUDA GPU the gather is the faster
	// (docs/performance/gpu.md), on the CPU there is nothing to save.
	Windows string `json:"windows,omitempty"`

	// GradCheckpoint recomputes each transformer block's activations in
	// the backward pass instead of keeping them (model.Memory.Checkpoint),
	// inside the one compiled step.
	GradCheckpoint bool `json:"grad_checkpoint,omitempty"`
	// LossChunk is how many positions the loss's logits are computed for
	// at a time (model.Memory.LossChunk): 0 is automatic (ModelMemory:
	// chunked on the CPU where a microbatch's float32 logits exceed 1 GiB,
	// whole otherwise), -1 computes them whole.
	LossChunk int `json:"loss_chunk,omitempty"`
}

// DefaultEvalTokens is EvalTokens when a config leaves it out: enough
// held-out tokens that evaluations over different random windows agree
// closely (docs/evaluation.md has the measurement).
const DefaultEvalTokens = 65536

// WithDefaults fills zero-valued fields that have a natural default.
func (c Config) WithDefaults() Config {
	c.Model = c.Model.WithDefaults()
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	if c.Tokenizer == "" {
		c.Tokenizer = "byte"
	}
	if c.ValFraction == 0 {
		c.ValFraction = 0.1
	}
	def(&c.Accum, 1)
	if c.Optimizer == "" {
		c.Optimizer = "adamw"
	}
	if c.Schedule == "" {
		c.Schedule = "cosine"
	}
	if c.Device == "" {
		c.Device = "cpu"
	}
	def(&c.LogEvery, 10)
	def(&c.EvalTokens, DefaultEvalTokens)
	def(&c.KeepCheckpoints, 3)
	def(&c.PrefetchDepth, 2)
	return c
}

// Validate reports the first setting that cannot run, naming the value and
// what was expected.
func (c Config) Validate() error {
	if err := c.Model.Validate(); err != nil {
		return err
	}
	if c.LossChunk < -1 {
		return fmt.Errorf("loss_chunk %d, want -1 (off), 0 (automatic) or a number of positions", c.LossChunk)
	}
	if err := c.checkDims(); err != nil {
		return err
	}
	ints := []struct {
		name string
		v    int
		min  int
	}{
		{"steps", c.Steps, 1}, {"batch", c.Batch, 1}, {"accum", c.Accum, 1},
		{"warmup", c.Warmup, 0}, {"log_every", c.LogEvery, 1}, {"eval_every", c.EvalEvery, 0},
		{"eval_tokens", c.EvalTokens, 1}, {"checkpoint_every", c.CheckpointEvery, 0},
		{"keep_checkpoints", c.KeepCheckpoints, 1}, {"prefetch_depth", c.PrefetchDepth, 1},
		{"patience", c.Patience, 0},
	}
	for _, f := range ints {
		if f.v < f.min {
			return fmt.Errorf("%s = %d, want >= %d", f.name, f.v, f.min)
		}
	}
	if err := c.validatePlan(); err != nil {
		return err
	}
	if c.PrefetchDepth > 8 {
		return fmt.Errorf("prefetch_depth = %d, want 1..8", c.PrefetchDepth)
	}
	if !(c.LR > 0) || c.LR > math.MaxFloat32 { // the step takes lr as a float32
		return fmt.Errorf("lr = %g, want a finite value > 0 (float32: at most %.3g)", c.LR, math.MaxFloat32)
	}
	floats := []struct {
		name string
		v    float64
	}{{"min_lr", c.MinLR}, {"grad_clip", c.GradClip}, {"decay_fraction", c.DecayFraction}}
	for _, f := range floats {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s = %g, want a finite value >= 0", f.name, f.v)
		}
	}
	if wd := c.WeightDecay; wd != nil && (*wd < 0 || math.IsNaN(*wd) || math.IsInf(*wd, 0)) {
		return fmt.Errorf("weight_decay = %g, want a finite value >= 0", *wd)
	}
	if c.MinLR > c.LR {
		return fmt.Errorf("min_lr = %g is above lr = %g", c.MinLR, c.LR)
	}
	if !(c.ValFraction > 0 && c.ValFraction < 1) {
		return fmt.Errorf("val_fraction = %g, want between 0 and 1", c.ValFraction)
	}
	if err := c.validateData(); err != nil {
		return err
	}
	if c.Device != "cpu" && c.Device != "gpu" {
		return fmt.Errorf("device %q, want cpu or gpu", c.Device)
	}
	return c.validateNames()
}

// validatePlan checks the micro-batch and the memory budget.
func (c Config) validatePlan() error {
	if _, err := ParseMemoryBudget(c.MemoryBudget); err != nil {
		return fmt.Errorf("memory_budget = %s, %w", c.MemoryBudget, err)
	}
	seqs := c.Batch * c.Accum
	switch {
	case c.MicroBatch < 0:
		return fmt.Errorf("micro_batch = %d, want 0 (auto) or a number of sequences >= 1", c.MicroBatch)
	case c.MicroBatch > 0 && seqs%c.MicroBatch != 0:
		// The smallest divisors and seqs itself: a long list helps nobody.
		var list []string
		d := 1
		for ; d <= seqs && d <= 1<<20 && len(list) < 6; d++ {
			if seqs%d == 0 {
				list = append(list, fmt.Sprint(d))
			}
		}
		if d <= seqs {
			list = append(list, "…", fmt.Sprint(seqs))
		}
		return fmt.Errorf("micro_batch = %d, want a divisor of batch × accum = %d × %d = %d (%s)",
			c.MicroBatch, c.Batch, c.Accum, seqs, strings.Join(list, ", "))
	}
	return nil
}

// validateNames checks the tokenizer, optimizer and schedule by name, and
// that the schedule fits the run, so a bad setting fails before a run
// folder is created rather than when the run starts.
func (c Config) validateNames() error {
	if c.Tokenizer == HFTokenizer {
		// The run's tokenizer.json: its ids are checked against the
		// model's when it is opened (CheckTokenizer).
	} else if v, err := data.TokenizerVocabSize(c.Tokenizer); err != nil {
		return err
	} else if c.Model.VocabSize < v {
		return fmt.Errorf("vocab_size = %d, want >= %d (the %s tokenizer's ids)", c.Model.VocabSize, v, c.Tokenizer)
	}
	if names := optim.Names(); !slices.Contains(names, c.Optimizer) {
		return fmt.Errorf("optimizer %q, want one of %s", c.Optimizer, strings.Join(names, ", "))
	}
	if !slices.Contains([]string{"", "auto", "device", "host"}, c.Windows) {
		return fmt.Errorf("windows = %q, want auto, device or host", c.Windows)
	}
	if names := optim.ScheduleNames(); !slices.Contains(names, c.Schedule) {
		return fmt.Errorf("schedule %q, want one of %s", c.Schedule, strings.Join(names, ", "))
	}
	if c.Schedule != "constant" && c.Warmup >= c.Steps {
		return fmt.Errorf("warmup = %d, want < steps (%d) for the %s schedule", c.Warmup, c.Steps, c.Schedule)
	}
	if _, err := NewSchedule(c); err != nil {
		return err
	}
	return nil
}

// TokensPerStep is the number of tokens one optimizer update consumes.
func (c Config) TokensPerStep() int { return c.Batch * c.Accum * c.Model.Context }

// EvalBatches is the number of batches (of Batch windows of Context
// tokens) one held-out evaluation draws: ceil(EvalTokens / (Batch·Context)).
func (c Config) EvalBatches() int { return evalBatches(c.EvalTokens, c.Batch, c.Model.Context) }

// EvalTokensCovered is the number of tokens one held-out evaluation covers:
// EvalBatches × Batch × Context, EvalTokens rounded up to whole batches.
func (c Config) EvalTokensCovered() int { return c.EvalBatches() * c.Batch * c.Model.Context }

// evalBatches is how many batches of batch × context tokens an
// evaluation of at least tokens tokens draws: ceil(tokens / (batch·context)).
func evalBatches(tokens, batch, context int) int {
	per := batch * context
	if tokens < 1 || per < 1 {
		return 0
	}
	return (tokens-1)/per + 1
}

// UnmarshalJSON decodes a config strictly (an unknown field is an error,
// as state.json and preset files require) and accepts eval_batches, the
// older form of eval_tokens: n batches become eval_tokens = n × batch ×
// context, the tokens those n batches covered, so a run resumed from an
// older checkpoint evaluates the same windows. A config may not give both.
func (c *Config) UnmarshalJSON(b []byte) error {
	type plain Config // without this method
	var v struct {
		plain
		EvalBatches *int `json:"eval_batches"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	cfg := Config(v.plain)
	if n := v.EvalBatches; n != nil {
		if cfg.EvalTokens != 0 {
			return errors.New("eval_batches and eval_tokens both given; eval_tokens replaces eval_batches, keep only it")
		}
		b, t := cfg.Batch, cfg.Model.Context
		switch {
		case *n < 0:
			return fmt.Errorf("eval_batches = %d, want >= 1 (or eval_tokens)", *n)
		case *n > 0 && b > 0 && t > 0: // otherwise Validate reports batch or context
			if b > math.MaxInt32 || t > math.MaxInt32 || *n > math.MaxInt/(b*t) {
				return fmt.Errorf("eval_batches = %d of batch %d × context %d is too many tokens", *n, b, t)
			}
			cfg.EvalTokens = *n * b * t
		}
	}
	*c = cfg
	return nil
}

// validateData checks that a config names one source of training text,
// the BPE-dropout applied to it, and the GaLore settings.
func (c Config) validateData() error {
	switch {
	case c.Data != "" && c.Corpus != "":
		return fmt.Errorf("data = %q and corpus = %q: want one source of training text, token shards (data) or a text corpus (corpus)", c.Data, c.Corpus)
	case c.ValData != "" && c.Data == "":
		return fmt.Errorf("val_data = %q without data: held-out shards go with training shards (data)", c.ValData)
	case !(c.BPEDropout >= 0 && c.BPEDropout < 1):
		return fmt.Errorf("bpe_dropout = %g, want a probability in [0, 1)", c.BPEDropout)
	case c.BPEDropout > 0 && c.Tokenizer != "gpt2":
		return fmt.Errorf("bpe_dropout = %g with tokenizer %q: BPE-dropout drops GPT-2 merges; want tokenizer gpt2", c.BPEDropout, c.Tokenizer)
	}
	return c.validateGaLore()
}
