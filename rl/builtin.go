package rl

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// DefaultAnswerPattern extracts the final answer of a completion that
// writes it as <answer>…</answer>, the format of DeepSeek-R1's and
// TRL's GRPO examples.
var DefaultAnswerPattern = regexp.MustCompile(`(?s)<answer>\s*(.*?)\s*</answer>`)

// DefaultFormatPattern matches a completion that is an
// <answer>…</answer> block, optionally preceded by a <think>…</think>
// block, with whitespace allowed around and between them.
var DefaultFormatPattern = regexp.MustCompile(`(?s)^\s*(?:<think>.*?</think>\s*)?<answer>.*?</answer>\s*$`)

// batchScorer is a Scorer made of a name and a function over a batch.
type batchScorer struct {
	name  string
	score func(ctx context.Context, items []Item) ([]float64, error)
}

// Name names the reward.
func (s batchScorer) Name() string { return s.name }

// Score scores the batch.
func (s batchScorer) Score(ctx context.Context, items []Item) ([]float64, error) {
	return s.score(ctx, items)
}

// eachItem scores the items one by one with f, in order, stopping
// early when ctx is cancelled; errors name the reward and the item.
func eachItem(ctx context.Context, name string, items []Item, f func(Item) (float64, error)) ([]float64, error) {
	out := make([]float64, len(items))
	for i, it := range items {
		if err := ctx.Err(); err != nil {
			return nil, failure(name, -1, err)
		}
		v, err := f(it)
		if err != nil {
			return nil, failure(name, i, err)
		}
		out[i] = v
	}
	return out, nil
}

// Exact is the reward "exact": 1 when the answer extracted from the
// completion equals the prompt's field, else 0 (also when no answer is
// found). The answer is extract's first capture group (its whole match
// when it has none) at its first match; nil extract means
// DefaultAnswerPattern. The field is a string, or a number written
// without trailing zeros; both sides are trimmed of white space, and
// compared as numbers when both parse as finite numbers ("4.0" equals
// 4). A prompt without the field is an error naming it.
func Exact(field string, extract *regexp.Regexp) Scorer {
	if extract == nil {
		extract = DefaultAnswerPattern
	}
	return batchScorer{name: "exact", score: func(ctx context.Context, items []Item) ([]float64, error) {
		return eachItem(ctx, "exact", items, func(it Item) (float64, error) {
			want, err := fieldText(it.Prompt, field)
			if err != nil {
				return 0, err
			}
			got, ok := extractAnswer(extract, it.Completion.Text)
			if ok && sameAnswer(got, want) {
				return 1, nil
			}
			return 0, nil
		})
	}}
}

// fieldText returns the prompt's field as text to compare an answer
// with.
func fieldText(p Prompt, field string) (string, error) {
	v, ok := p.Fields[field]
	if !ok {
		return "", fmt.Errorf("the prompt has no field %q to check the answer against", field)
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case json.Number:
		return x.String(), nil
	}
	return "", fmt.Errorf("the prompt's field %q is %s, want a string or a number", field, jsonKind(v))
}

// extractAnswer returns re's first capture group (or whole match) at
// its first match in s.
func extractAnswer(re *regexp.Regexp, s string) (string, bool) {
	m := re.FindStringSubmatch(s)
	switch {
	case m == nil:
		return "", false
	case len(m) > 1:
		return m[1], true
	}
	return m[0], true
}

// sameAnswer compares two answers trimmed, as numbers when both are
// finite numbers, else as text.
func sameAnswer(a, b string) bool {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if a == b {
		return true
	}
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	return errA == nil && errB == nil && !math.IsInf(x, 0) && !math.IsNaN(x) && x == y
}

// Format is the reward "format": 1 when the completion matches pattern,
// else 0; nil pattern means DefaultFormatPattern. A pattern that should
// match the whole completion anchors itself with ^ and $.
func Format(pattern *regexp.Regexp) Scorer {
	if pattern == nil {
		pattern = DefaultFormatPattern
	}
	return batchScorer{name: "format", score: func(ctx context.Context, items []Item) ([]float64, error) {
		return eachItem(ctx, "format", items, func(it Item) (float64, error) {
			if pattern.MatchString(it.Completion.Text) {
				return 1, nil
			}
			return 0, nil
		})
	}}
}

// Length is the reward "length": −Tokens/budget, a penalty growing
// with the completion's length (0 for an empty completion, −1 for one
// that fills the budget), which, added to a correctness reward with a
// small weight, prefers the shorter of two right answers. budget is the
// completion budget in tokens and must be positive.
func Length(budget int) Scorer {
	return batchScorer{name: "length", score: func(ctx context.Context, items []Item) ([]float64, error) {
		if budget <= 0 {
			return nil, failure("length", -1, fmt.Errorf("budget %d tokens, want > 0", budget))
		}
		return eachItem(ctx, "length", items, func(it Item) (float64, error) {
			if it.Completion.Tokens < 0 {
				return 0, fmt.Errorf("completion has %d tokens, want >= 0", it.Completion.Tokens)
			}
			return -float64(it.Completion.Tokens) / float64(budget), nil
		})
	}}
}

// BuiltinOptions configures the built-in rewards ParseRewards makes.
type BuiltinOptions struct {
	// AnswerField is the prompt field "exact" checks against; "" means
	// "answer".
	AnswerField string
	// Extract is "exact"'s answer pattern; nil means
	// DefaultAnswerPattern.
	Extract *regexp.Regexp
	// Format is "format"'s pattern; nil means DefaultFormatPattern.
	Format *regexp.Regexp
	// Budget is the completion budget in tokens "length" divides by.
	Budget int
}

// knownRewards lists the rewards ParseRewards knows, for its errors.
const knownRewards = "exact, format, length"

// ParseRewards reads a weighted sum of built-in rewards written as
// "name[:weight],…" (e.g. "exact:1,format:0.2"; a weight defaults to
// 1), the --reward flag's syntax. Unknown or repeated names, malformed
// or non-finite weights, and "length" without a positive
// opts.Budget are errors.
func ParseRewards(spec string, opts BuiltinOptions) ([]Weighted, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("rewards %q: empty; want name[:weight],… with names from %s", spec, knownRewards)
	}
	field := opts.AnswerField
	if field == "" {
		field = "answer"
	}
	var out []Weighted
	seen := map[string]bool{}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		name, weightText, hasWeight := strings.Cut(part, ":")
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("rewards %q: entry %q has no name; want name[:weight]", spec, part)
		}
		weight := 1.0
		if hasWeight {
			w, err := strconv.ParseFloat(strings.TrimSpace(weightText), 64)
			if err != nil {
				return nil, fmt.Errorf("rewards %q: weight %q of %s is not a number", spec, weightText, name)
			}
			if math.IsNaN(w) || math.IsInf(w, 0) {
				return nil, fmt.Errorf("rewards %q: weight %q of %s is not finite", spec, weightText, name)
			}
			weight = w
		}
		if seen[name] {
			return nil, fmt.Errorf("rewards %q: %s appears twice; give each reward once", spec, name)
		}
		seen[name] = true
		var s Scorer
		switch name {
		case "exact":
			s = Exact(field, opts.Extract)
		case "format":
			s = Format(opts.Format)
		case "length":
			if opts.Budget <= 0 {
				return nil, fmt.Errorf("rewards %q: length needs a completion budget > 0, have %d", spec, opts.Budget)
			}
			s = Length(opts.Budget)
		default:
			return nil, fmt.Errorf("rewards %q: unknown reward %q; known: %s", spec, name, knownRewards)
		}
		out = append(out, Weighted{Scorer: s, Weight: weight})
	}
	return out, nil
}
