package finetune

import (
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/optim"
	"github.com/posttrainllm/posttrainllm/peft"
	"github.com/posttrainllm/posttrainllm/step"
)

// Every name of the registry builds the objective of that name, an
// unknown one is refused naming the known ones, and resume compares the
// built objectives: the same objective with a default spelled out
// resumes, another hyperparameter or objective does not.
func TestObjectiveRegistry(t *testing.T) {
	for _, name := range ObjectiveNames() {
		o, err := NewObjective(Config{Objective: name})
		if err != nil || o.Name() != string(name) {
			t.Errorf("%s: built %v (%v)", name, o, err)
		}
	}
	if o, err := NewObjective(Config{}); err != nil || o.Name() != "sft" {
		t.Errorf("no objective: %v (%v), want sft", o, err)
	}
	if _, err := NewObjective(Config{Objective: "kto"}); err == nil || !strings.Contains(err.Error(), `"kto"`) || !strings.Contains(err.Error(), "simpo") {
		t.Errorf("unknown objective: %v", err)
	}
	dpo, err := NewObjective(Config{Objective: DPO})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameObjective(Config{Objective: DPO, Beta: 0.1}, dpo); err != nil {
		t.Errorf("DPO with its default β spelled out: %v", err)
	}
	for _, saved := range []Config{{Objective: DPO, Beta: 0.2}, {Objective: IPO}, {}} {
		if err := sameObjective(saved, dpo); err == nil {
			t.Errorf("resuming %+v as DPO β 0.1 accepted", saved)
		}
	}
	// Another objective under a built-in name is not the built-in one; under
	// its own name, the name is what a checkpoint records of it.
	if err := sameObjective(Config{Objective: SFT}, renamed{SupervisedObjective{}, "sft"}); err == nil {
		t.Error("another objective under the name sft resumed an SFT checkpoint")
	}
	if err := sameObjective(Config{Objective: "mine"}, renamed{SupervisedObjective{}, "mine"}); err != nil {
		t.Errorf("an objective of its own name: %v", err)
	}
}

// renamed is SFT under another name: an objective outside the registry.
type renamed struct {
	SupervisedObjective
	name string
}

func (r renamed) Name() string { return r.name }

// The layouts of the built-in objectives: SFT weighted (packed with
// Pack), the preference objectives rows with PreferenceAux, and a full
// DPO's reference as a row input where adapters compute it in the step.
func TestObjectiveLayouts(t *testing.T) {
	full, adapted := Policy{}, Policy{Adapter: &peft.Adapter{}}
	for _, c := range []struct {
		o       Objective
		p       Policy
		inputs  step.Inputs
		rowIn   int
		auxSize int
	}{
		{SupervisedObjective{}, full, step.WeightedInputs, 0, 0},
		{SupervisedObjective{Pack: true}, adapted, step.PackedInputs, 0, 0},
		{PreferenceObjective{Preference{Objective: DPO, Beta: 0.1}}, full, step.RowInputs, 1, 4},
		{PreferenceObjective{Preference{Objective: DPO, Beta: 0.1}}, adapted, step.RowInputs, 0, 4},
		{PreferenceObjective{Preference{Objective: ORPO, Lambda: 0.1}}, full, step.RowInputs, 0, 4},
	} {
		l := c.o.Layout(c.p)
		if l.Inputs != c.inputs || l.RowInputs != c.rowIn || len(l.Aux) != c.auxSize {
			t.Errorf("%s (adapter %v): layout %+v, want %v with %d row inputs and %d aux", c.o.Name(), c.p.Adapter != nil, l, c.inputs, c.rowIn, c.auxSize)
		}
	}
}

// NewStep refuses layouts that contradict themselves.
func TestNewStepRefusesBadLayouts(t *testing.T) {
	opt, err := optim.New("sgd", []optim.Param{{Name: "w", Shape: []int{2}}}, optim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		l    step.Layout
		want string
	}{
		{step.Layout{Trainable: 0}, "trainable"},
		{step.Layout{Trainable: 1, Frozen: 2}, "frozen arrays with token inputs"},
		{step.Layout{Trainable: 1, Inputs: step.WeightedInputs, RowInputs: 1}, "row inputs"},
		{step.Layout{Trainable: 1, Inputs: step.Inputs(7)}, "Inputs(7)"},
	} {
		if _, err := step.NewStep(step.MeanLoss(nil), opt, c.l, step.StepOptions{Accum: 1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("layout %+v: %v, want an error naming %q", c.l, err, c.want)
		}
	}
}
