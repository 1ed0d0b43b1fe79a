package rl

import (
	"context"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// item makes an item with prompt fields and a completion text.
func item(fields map[string]any, completion string, tokens int) Item {
	return Item{Prompt: Prompt{Text: "q", Fields: fields}, Completion: Completion{Text: completion, Tokens: tokens}}
}

// scores runs s on items, failing the test on an error.
func scores(t *testing.T, s Scorer, items ...Item) []float64 {
	t.Helper()
	got, err := s.Score(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestExactNumbersAndStrings(t *testing.T) {
	num := map[string]any{"answer": 42.0}
	frac := map[string]any{"answer": 2.5}
	text := map[string]any{"answer": " Paris "}
	numText := map[string]any{"answer": "7"}
	items := []Item{
		item(num, "<think>6*7</think><answer>42</answer>", 0),
		item(num, "<answer> 42.0 </answer>", 0),
		item(num, "<answer>\n42\n</answer> and <answer>41</answer>", 0),
		item(num, "<answer>41</answer><answer>42</answer>", 0), // the first answer counts
		item(num, "42", 0), // no answer tags
		item(num, "<answer>4.2e1</answer>", 0),
		item(frac, "<answer>2.50</answer>", 0),
		item(frac, "<answer>2.5.0</answer>", 0),
		item(text, "<answer>Paris</answer>", 0),
		item(text, "<answer>paris</answer>", 0),
		item(numText, "<answer>7.00</answer>", 0),
		item(numText, "<answer>seven</answer>", 0),
	}
	want := []float64{1, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0}
	if got := scores(t, Exact("answer", nil), items...); !reflect.DeepEqual(got, want) {
		t.Errorf("Exact = %v, want %v", got, want)
	}
	if n := Exact("answer", nil).Name(); n != "exact" {
		t.Errorf("Name = %q, want exact", n)
	}
}

func TestExactCustomPattern(t *testing.T) {
	fields := map[string]any{"solution": 18.0}
	boxed := regexp.MustCompile(`\\boxed\{([^}]*)\}`)
	items := []Item{
		item(fields, `so the result is \boxed{18}.`, 0),
		item(fields, `<answer>18</answer>`, 0),
		item(fields, `\boxed{19}`, 0),
	}
	if got, want := scores(t, Exact("solution", boxed), items...), []float64{1, 0, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("Exact with \\boxed{} = %v, want %v", got, want)
	}
	// A pattern without a group compares its whole match.
	digits := regexp.MustCompile(`[0-9]+`)
	if got, want := scores(t, Exact("solution", digits), items...), []float64{1, 1, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("Exact with a group-less pattern = %v, want %v", got, want)
	}
}

func TestExactFieldErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields map[string]any
		want   string
	}{
		{"missing", map[string]any{"answer": "1"}, `reward exact: item 1: the prompt has no field "target"`},
		{"bool", map[string]any{"target": true}, `field "target" is a boolean, want a string or a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			items := []Item{item(map[string]any{"target": "1"}, "", 0), item(tc.fields, "<answer>1</answer>", 0)}
			_, err := Exact("target", nil).Score(context.Background(), items)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	texts := map[string]float64{
		"<answer>5</answer>":                                   1,
		"  <think>2+3 is 5</think>\n<answer>5</answer>\n":      1,
		"<think>\nmulti\nline\n</think><answer>\n5\n</answer>": 1,
		"The answer is <answer>5</answer>":                     0, // text before the block
		"<answer>5</answer> because":                           0, // text after it
		"<think>hm</think>":                                    0, // no answer
		"<answer>5":                                            0,
		"<answer>5</answer><think>late</think>":                0,
	}
	for text, want := range texts {
		if got := scores(t, Format(nil), item(nil, text, 0)); got[0] != want {
			t.Errorf("Format(nil) on %q = %v, want %v", text, got[0], want)
		}
	}
	custom := Format(regexp.MustCompile(`^Answer: [0-9]+$`))
	if got, want := scores(t, custom, item(nil, "Answer: 12", 0), item(nil, "Answer: twelve", 0)), []float64{1, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("custom Format = %v, want %v", got, want)
	}
	if n := custom.Name(); n != "format" {
		t.Errorf("Name = %q, want format", n)
	}
}

func TestLength(t *testing.T) {
	got := scores(t, Length(64), item(nil, "", 0), item(nil, "x", 16), item(nil, "y", 64))
	if want := []float64{0, -0.25, -1}; !reflect.DeepEqual(got, want) {
		t.Errorf("Length(64) = %v, want %v", got, want)
	}
	if _, err := Length(0).Score(context.Background(), []Item{item(nil, "", 1)}); err == nil || !strings.Contains(err.Error(), "budget 0") {
		t.Errorf("Length(0): error %v, want one naming the budget", err)
	}
}

func TestParseRewards(t *testing.T) {
	opts := BuiltinOptions{Budget: 100}
	got, err := ParseRewards(" exact:1, format:0.2,length ", opts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var weights []float64
	for _, w := range got {
		names = append(names, w.Scorer.Name())
		weights = append(weights, w.Weight)
	}
	if !reflect.DeepEqual(names, []string{"exact", "format", "length"}) || !reflect.DeepEqual(weights, []float64{1, 0.2, 1}) {
		t.Fatalf("ParseRewards = %v %v, want [exact format length] [1 0.2 1]", names, weights)
	}
	// The options reach the built-ins: the answer field defaults to
	// "answer", the patterns and budget are passed on.
	it := item(map[string]any{"answer": "3"}, "<answer>3</answer>", 50)
	s, err := Score(context.Background(), got, []Item{it})
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + 0.2 - 0.5; s.Total[0] != want {
		t.Errorf("total %v, want %v", s.Total[0], want)
	}
	custom, err := ParseRewards("exact,format", BuiltinOptions{
		AnswerField: "gold",
		Extract:     regexp.MustCompile(`=\s*(\S+)`),
		Format:      regexp.MustCompile(`^x`),
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err = Score(context.Background(), custom, []Item{item(map[string]any{"gold": "9"}, "x = 9", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]float64{"exact": {1}, "format": {1}}; !reflect.DeepEqual(s.Each, want) {
		t.Errorf("custom options: scores %v, want %v", s.Each, want)
	}
}

func TestParseRewardsErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"", "empty"},
		{"exact,bleu:2", `unknown reward "bleu"; known: exact, format, length`},
		{"exact,exact:2", "exact appears twice"},
		{"exact:two", `weight "two" of exact is not a number`},
		{"exact:", `weight "" of exact is not a number`},
		{"format:inf", `weight "inf" of format is not finite`},
		{"format:NaN", `weight "NaN" of format is not finite`},
		{"exact,,format", `entry "" has no name`},
		{":1", `entry ":1" has no name`},
		{"length", "length needs a completion budget > 0"},
	} {
		if _, err := ParseRewards(tc.spec, BuiltinOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRewards(%q): error %v, want one containing %q", tc.spec, err, tc.want)
		}
	}
}
