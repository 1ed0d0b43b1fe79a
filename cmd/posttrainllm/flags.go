package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/posttrainllm/posttrainllm/finetune"
	"github.com/posttrainllm/posttrainllm/train"
)

// configFlag is a command-line flag that overrides one train.Config field.
type configFlag struct {
	name  string // flag name, without dashes
	field string // the field's JSON name, as Validate names it
	// model marks fields of the model config: a checkpoint can only resume
	// into the model it was trained as.
	model bool
	apply func(*train.Config) // copies the flag's value into a config
	get   func(train.Config) string
}

// overrides are the config flags of one command. Only flags the user set
// (Changed) override the preset or checkpoint.
type overrides struct {
	fs    *pflag.FlagSet
	flags []configFlag
}

// addConfigFlags registers a flag for every train.Config field on fs,
// except those named in skip (a command that gives a name another meaning).
func addConfigFlags(fs *pflag.FlagSet, skip ...string) *overrides {
	o := &overrides{fs: fs}
	skipped := func(name string) bool { return slices.Contains(skip, name) }
	intF := func(name, field string, model bool, usage string, p func(*train.Config) *int) {
		if skipped(name) {
			return
		}
		v := new(int)
		fs.IntVar(v, name, 0, usage)
		o.flags = append(o.flags, configFlag{name: name, field: field, model: model,
			apply: func(c *train.Config) { *p(c) = *v },
			get:   func(c train.Config) string { return fmt.Sprint(*p(&c)) }})
	}
	floatF := func(name, field string, model bool, usage string, p func(*train.Config) *float64) {
		if skipped(name) {
			return
		}
		v := new(float64)
		fs.Float64Var(v, name, 0, usage)
		o.flags = append(o.flags, configFlag{name: name, field: field, model: model,
			apply: func(c *train.Config) { *p(c) = *v },
			get:   func(c train.Config) string { return fmt.Sprint(*p(&c)) }})
	}
	stringF := func(name, field string, model bool, usage string, p func(*train.Config) *string) {
		if skipped(name) {
			return
		}
		v := new(string)
		fs.StringVar(v, name, "", usage)
		o.flags = append(o.flags, configFlag{name: name, field: field, model: model,
			apply: func(c *train.Config) { *p(c) = *v },
			get:   func(c train.Config) string { return *p(&c) }})
	}
	boolF := func(name, field string, model bool, usage string, p func(*train.Config) *bool) {
		if skipped(name) {
			return
		}
		v := new(bool)
		fs.BoolVar(v, name, false, usage)
		o.flags = append(o.flags, configFlag{name: name, field: field, model: model,
			apply: func(c *train.Config) { *p(c) = *v },
			get:   func(c train.Config) string { return fmt.Sprint(*p(&c)) }})
	}

	// The model.
	intF("vocab", "vocab_size", true, "vocabulary size (at least the tokenizer's)", func(c *train.Config) *int { return &c.Model.VocabSize })
	intF("pad-vocab-to", "pad_vocab_to", true, "round the embedding and output rows up to a multiple of this (padding logits masked; 64 aligns GPT-2's vocabulary for GPU GEMMs; 0 = none)",
		func(c *train.Config) *int { return &c.Model.PadVocabTo })
	intF("d-model", "d_model", true, "model width", func(c *train.Config) *int { return &c.Model.DModel })
	intF("layers", "layers", true, "transformer blocks", func(c *train.Config) *int { return &c.Model.Layers })
	intF("heads", "heads", true, "attention heads (must divide --d-model)", func(c *train.Config) *int { return &c.Model.Heads })
	intF("context", "context", true, "sequence length in tokens", func(c *train.Config) *int { return &c.Model.Context })
	floatF("mlp-ratio", "mlp_ratio", true, "MLP hidden width as a multiple of --d-model", func(c *train.Config) *float64 { return &c.Model.MLPRatio })
	stringF("dtype", "dtype", true, "compute dtype: float32, bfloat16 or float16", func(c *train.Config) *string { return &c.Model.Dtype })
	stringF("gelu", "gelu", true, "MLP activation: exact (erf) or tanh (GPT-2's approximation, cheaper on the CPU)", func(c *train.Config) *string { return &c.Model.GELU })
	boolF("master-fp32", "master_fp32", true, "keep float32 master parameters when --dtype is lower", func(c *train.Config) *bool { return &c.Model.MasterFP32 })
	boolF("tied-embeddings", "tied_embeddings", true, "output head reuses the token embeddings", func(c *train.Config) *bool { return &c.Model.TiedEmbeddings })
	boolF("embed-norm", "embed_norm", true, "RMSNorm right after the embedding", func(c *train.Config) *bool { return &c.Model.EmbedNorm })
	floatF("z-loss", "z_loss", true, "z-loss coefficient (0 disables)", func(c *train.Config) *float64 { return &c.Model.ZLoss })
	floatF("rope-base", "rope_base", true, "rotary embedding base", func(c *train.Config) *float64 { return &c.Model.RoPEBase })
	floatF("norm-eps", "norm_eps", true, "RMSNorm epsilon", func(c *train.Config) *float64 { return &c.Model.NormEps })
	floatF("init-std", "init_std", true, "standard deviation of initial weights", func(c *train.Config) *float64 { return &c.Model.InitStd })

	// Data.
	if !skipped("tokenizer") {
		// A tokenizer brings its vocabulary size unless --vocab is given.
		v := new(string)
		fs.StringVar(v, "tokenizer", "", "tokenizer: byte, gpt2, or hf (an imported run's tokenizer.json); sets the vocabulary to its size unless --vocab is given")
		o.flags = append(o.flags, configFlag{name: "tokenizer", field: "tokenizer",
			apply: func(c *train.Config) {
				if fs.Changed("vocab") {
					c.Tokenizer = *v
				} else {
					*c = c.WithTokenizer(*v)
				}
			},
			get: func(c train.Config) string { return c.Tokenizer }})
	}
	stringF("corpus", "corpus", false, "text file or directory to train on (default: the Go standard library sources)", func(c *train.Config) *string { return &c.Corpus })
	stringF("data", "data", false, "llm.c token shards to train on instead of --corpus: a directory of .bin files or a quoted glob such as 'dir/*_train_*.bin'", func(c *train.Config) *string { return &c.Data })
	stringF("val-data", "val_data", false, "held-out token shards for --data (default: the last shard of --data)", func(c *train.Config) *string { return &c.ValData })
	floatF("bpe-dropout", "bpe_dropout", false, "re-tokenise each training window with GPT-2 BPE-dropout at this probability (gpt2 only; 0 disables)", func(c *train.Config) *float64 { return &c.BPEDropout })
	floatF("val-fraction", "val_fraction", false, "share of the tokens held out for evaluation", func(c *train.Config) *float64 { return &c.ValFraction })

	// The run.
	intF("steps", "steps", false, "optimizer updates", func(c *train.Config) *int { return &c.Steps })
	intF("batch", "batch", false, "sequences per microbatch", func(c *train.Config) *int { return &c.Batch })
	intF("accum", "accum", false, "microbatches per update (gradient accumulation)", func(c *train.Config) *int { return &c.Accum })
	if !skipped("micro-batch") {
		v := new(int)
		fs.Var((*microBatchValue)(v), "micro-batch",
			"sequences per forward pass, dividing --batch × --accum: auto (the batch on the CPU, on a GPU the largest whose step fits --memory-budget) or a number")
		o.flags = append(o.flags, configFlag{name: "micro-batch", field: "micro_batch",
			apply: func(c *train.Config) { c.MicroBatch = *v },
			get:   func(c train.Config) string { return (*microBatchValue)(&c.MicroBatch).String() }})
	}
	stringF("memory-budget", "memory_budget", false,
		fmt.Sprintf("memory the run is held to: an automatic --micro-batch plans within it, and MLX waits for queued work before going past it; bytes (80GiB) or a fraction of the device's memory (default %g)", train.DefaultMemoryFraction),
		func(c *train.Config) *string { return &c.MemoryBudget })
	stringF("optimizer", "optimizer", false, "adamw, lion, adafactor, muon, sgd, galore or sophia", func(c *train.Config) *string { return &c.Optimizer })
	intF("galore-rank", "galore_rank", false, "galore: rank r of the gradient projection (default 128)", func(c *train.Config) *int { return &c.GaLoreRank })
	intF("galore-gap", "galore_gap", false, "galore: updates between SVD refreshes of the projections (default 200)", func(c *train.Config) *int { return &c.GaLoreGap })
	intF("sophia-every", "sophia_every", false, "sophia: updates between Hessian estimates (default 10)", func(c *train.Config) *int { return &c.SophiaEvery })
	floatF("sophia-rho", "sophia_rho", false, "sophia: ρ, the Hessian's weight in the clipped preconditioner (default 0.04)", func(c *train.Config) *float64 { return &c.SophiaRho })
	floatF("galore-scale", "galore_scale", false, "galore: scale of the projected-back update (default 0.25)", func(c *train.Config) *float64 { return &c.GaLoreScale })
	if !skipped("weight-decay") {
		v := new(float64)
		fs.Float64Var(v, "weight-decay", 0, "weight decay (default: the optimizer's)")
		o.flags = append(o.flags, configFlag{name: "weight-decay", field: "weight_decay",
			apply: func(c *train.Config) { wd := *v; c.WeightDecay = &wd },
			get: func(c train.Config) string {
				if c.WeightDecay == nil {
					return "default"
				}
				return fmt.Sprint(*c.WeightDecay)
			}})
	}
	floatF("grad-clip", "grad_clip", false, "clip gradients to this global norm (0 disables)", func(c *train.Config) *float64 { return &c.GradClip })
	stringF("schedule", "schedule", false, "learning-rate schedule: constant, cosine or wsd", func(c *train.Config) *string { return &c.Schedule })
	if !skipped("lr") {
		// The floor follows the peak (train.Config.WithLR); --min-lr,
		// applied after, sets it outright.
		v := new(float64)
		fs.Float64Var(v, "lr", 0, "peak learning rate (--min-lr follows it, keeping the preset's ratio, unless given)")
		o.flags = append(o.flags, configFlag{name: "lr", field: "lr",
			apply: func(c *train.Config) { *c = c.WithLR(*v) },
			get:   func(c train.Config) string { return fmt.Sprint(c.LR) }})
	}
	floatF("min-lr", "min_lr", false, "final learning rate of cosine and wsd (default: the preset's share of --lr)", func(c *train.Config) *float64 { return &c.MinLR })
	intF("warmup", "warmup", false, "learning-rate warm-up updates (unset, a preset's warm-up that does not fit --steps shrinks to half of them)", func(c *train.Config) *int { return &c.Warmup })
	floatF("decay-fraction", "decay_fraction", false, "wsd: share of the steps spent decaying", func(c *train.Config) *float64 { return &c.DecayFraction })
	boolF("grad-checkpoint", "grad_checkpoint", false, "recompute each transformer block's activations in the backward pass instead of keeping them: less memory, about one more forward pass of time",
		func(c *train.Config) *bool { return &c.GradCheckpoint })
	intF("loss-chunk", "loss_chunk", false, "positions whose logits the loss computes at a time: 0 automatic (where a microbatch has over 1 GiB of float32 logits, chunks of at most 64 MiB of them; a GPU's fused pretraining loss stays whole), -1 all at once",
		func(c *train.Config) *int { return &c.LossChunk })
	boolF("compile", "compile", false, "compile the whole step into one MLX function (--compile=false interprets it)", func(c *train.Config) *bool { return &c.Compile })
	if !skipped("device") {
		// Not copied into the settings: the device is chosen from the flag
		// and the settings once the other flags apply (chooseDevice).
		fs.String("device", "auto", deviceUsage)
		o.flags = append(o.flags, configFlag{name: "device", field: "device",
			apply: func(*train.Config) {},
			get:   func(c train.Config) string { return c.Device }})
	}
	if !skipped("seed") {
		v := new(uint64)
		fs.Uint64Var(v, "seed", 0, "seed of initialisation and data order")
		o.flags = append(o.flags, configFlag{name: "seed", field: "seed",
			apply: func(c *train.Config) { c.Seed = *v },
			get:   func(c train.Config) string { return fmt.Sprint(c.Seed) }})
	}
	intF("log-every", "log_every", false, "log the loss every N updates", func(c *train.Config) *int { return &c.LogEvery })
	intF("eval-every", "eval_every", false, "held-out loss every N updates (0 disables)", func(c *train.Config) *int { return &c.EvalEvery })
	intF("eval-tokens", "eval_tokens", false, fmt.Sprintf("held-out tokens per evaluation, rounded up to whole batches (%d unless the preset sets it)", train.DefaultEvalTokens), func(c *train.Config) *int { return &c.EvalTokens })
	intF("checkpoint-every", "checkpoint_every", false, "checkpoint every N updates (0: only at the end)", func(c *train.Config) *int { return &c.CheckpointEvery })
	intF("keep-checkpoints", "keep_checkpoints", false, "newest checkpoints kept", func(c *train.Config) *int { return &c.KeepCheckpoints })
	boolF("keep-best", "keep_best", false, "also keep the checkpoint of the lowest held-out loss so far, in RUN/best (needs --eval-every and held-out data)",
		func(c *train.Config) *bool { return &c.KeepBest })
	intF("patience", "patience", false, "stop early, with a checkpoint, once the held-out loss has not improved for N evaluations in a row (0: never)",
		func(c *train.Config) *int { return &c.Patience })
	intF("prefetch-depth", "prefetch_depth", false, "batches prepared ahead (1-8)", func(c *train.Config) *int { return &c.PrefetchDepth })
	stringF("windows", "windows", false, "where each update's token windows are made: device (gathered from the corpus held on the device), host (copied from the host) or auto (device on a GPU, host on the CPU)",
		func(c *train.Config) *string { return &c.Windows })
	return o
}

// microBatchValue is --micro-batch: "auto" (0) or a number of sequences.
type microBatchValue int

func (v *microBatchValue) String() string {
	if *v == 0 {
		return "auto"
	}
	return strconv.Itoa(int(*v))
}

func (v *microBatchValue) Set(s string) error {
	if s == "auto" {
		*v = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return errors.New("want auto or a number of sequences >= 1 that divides --batch × --accum")
	}
	*v = microBatchValue(n)
	return nil
}

func (v *microBatchValue) Type() string { return "auto|N" }

// changed returns the flags the user set, in registration order.
func (o *overrides) changed() []configFlag {
	var out []configFlag
	for _, f := range o.flags {
		if o.fs.Changed(f.name) {
			out = append(out, f)
		}
	}
	return out
}

// isChanged reports whether the user set the config flag called name.
func (o *overrides) isChanged(name string) bool { return o.fs.Changed(name) }

// value is the flag's text as the user gave it.
func (o *overrides) value(name string) string { return o.fs.Lookup(name).Value.String() }

// invalidFlagError is a flag value that cannot run.
type invalidFlagError struct {
	flag, value, want string
}

func (e *invalidFlagError) Error() string {
	return fmt.Sprintf("invalid --%s %s: %s", e.flag, e.value, e.want)
}

// validatePrefix matches Validate's "field = value, want …" messages, so a
// flag error can say "invalid --steps 0: want >= 1".
var validatePrefix = regexp.MustCompile(`^(?:model config: )?([a-z0-9_]+) = [^,]*, (want .*)$`)

// flagError explains err, a Validate error that f's value causes, in terms
// of the flag.
func (o *overrides) flagError(f configFlag, err error) error {
	msg := err.Error()
	if m := validatePrefix.FindStringSubmatch(msg); m != nil && m[1] == f.field {
		msg = m[2]
	}
	return &invalidFlagError{flag: f.name, value: o.value(f.name), want: msg}
}

// apply overrides base with the flags the user set and validates the
// result. base must be valid. A warm-up the user did not set shrinks to
// fit the steps (train.Config.FitWarmup). An invalid result is blamed on the flag whose
// own setting Validate names, else on the first flag that alone makes base
// invalid, or else on the combination.
func (o *overrides) apply(base train.Config) (train.Config, error) {
	with := func(flags ...configFlag) train.Config {
		c := base
		for _, f := range flags {
			f.apply(&c)
		}
		if !o.isChanged("warmup") {
			c = c.FitWarmup()
		}
		return c
	}
	changed := o.changed()
	cfg := with(changed...)
	err := cfg.Validate()
	if err == nil {
		return cfg, nil
	}
	if m := validatePrefix.FindStringSubmatch(err.Error()); m != nil {
		for _, f := range changed {
			if f.field == m[1] {
				return cfg, o.flagError(f, err)
			}
		}
	}
	for _, f := range changed {
		if e := with(f).Validate(); e != nil {
			return cfg, o.flagError(f, e)
		}
	}
	var set []string
	for _, f := range changed {
		set = append(set, "--"+f.name+" "+o.value(f.name))
	}
	if len(set) == 0 {
		return cfg, err
	}
	return cfg, fmt.Errorf("invalid combination %s: %w", strings.Join(set, " "), err)
}

// addSettingFlags registers a flag for every fine-tune setting
// (finetune.Settings) on fs, with the setting's default and usage, each
// setting its field of req.
func addSettingFlags(fs *pflag.FlagSet, req *finetune.Request) {
	for _, s := range finetune.Settings() {
		switch p := s.Field(req).(type) {
		case *int:
			fs.IntVar(p, s.Flag, s.Default.(int), s.Usage)
		case *float64:
			fs.Float64Var(p, s.Flag, s.Default.(float64), s.Usage)
		case *string:
			fs.StringVar(p, s.Flag, s.Default.(string), s.Usage)
		case *bool:
			fs.BoolVar(p, s.Flag, s.Default.(bool), s.Usage)
		case *[]string:
			fs.StringSliceVar(p, s.Flag, s.Default.([]string), s.Usage)
		default:
			panic(fmt.Sprintf("fine-tune setting %s: a field of type %T, which no flag holds", s.Key, p))
		}
	}
}
