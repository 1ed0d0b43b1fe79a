package finetune

import (
	"fmt"
	"reflect"
	"strings"
)

// ObjectiveName names a built-in objective (Config.Objective).
type ObjectiveName string

// The built-in objectives.
const (
	// SFT is the cross-entropy of the counted targets (the default).
	SFT ObjectiveName = "sft"
	// DPO is Direct Preference Optimization (Rafailov et al. 2023):
	// −log σ(β·((πc − πc_ref) − (πr − πr_ref))) per pair, π the sequence
	// log-probability of an answer.
	DPO ObjectiveName = "dpo"
	// IPO is Identity Preference Optimization (Azar et al. 2023):
	// (h − 1/(2β))² per pair, h DPO's log-ratio difference.
	IPO ObjectiveName = "ipo"
	// ORPO is Odds Ratio Preference Optimization (Hong et al. 2024): the
	// chosen answer's mean NLL per token plus λ·(−log σ(log odds_c −
	// log odds_r)), the odds from length-normalised log-probabilities. No
	// reference model.
	ORPO ObjectiveName = "orpo"
	// SimPO is Simple Preference Optimization (Meng et al. 2024):
	// −log σ(β·(πc/|yc| − πr/|yr|) − γ), length-normalised log-probabilities
	// and a target margin γ. No reference model.
	SimPO ObjectiveName = "simpo"
)

// objectiveBuilders is the registry of built-in objectives: each builds
// its Objective from a fine-tune's settings, refusing the settings it
// cannot train with. Flags, Config.Validate and resume find an
// objective here by name. To add one, implement Objective in a file of
// its own and add its name and builder here.
var objectiveBuilders = []struct {
	name  ObjectiveName
	build func(Config) (Objective, error)
}{
	{SFT, newSupervisedObjective},
	{DPO, newPreferenceObjective},
	{IPO, newPreferenceObjective},
	{ORPO, newPreferenceObjective},
	{SimPO, newPreferenceObjective},
	{GRPOName, newGRPOObjective},
}

// ObjectiveNames lists the built-in objectives a fine-tune accepts.
func ObjectiveNames() []ObjectiveName {
	out := make([]ObjectiveName, len(objectiveBuilders))
	for i, b := range objectiveBuilders {
		out[i] = b.name
	}
	return out
}

// objectiveList is ObjectiveNames for an error message.
func objectiveList() string {
	names := make([]string, len(objectiveBuilders))
	for i, b := range objectiveBuilders {
		names[i] = string(b.name)
	}
	return strings.Join(names, ", ")
}

// NewObjective returns the built-in objective ft names (SFT when empty)
// with ft's hyperparameters, their unset ones at the objective's
// defaults; it refuses an unknown name and settings the objective cannot
// train with.
func NewObjective(ft Config) (Objective, error) {
	name := ft.Objective
	if name == "" {
		name = SFT
	}
	for _, b := range objectiveBuilders {
		if b.name == name {
			return b.build(ft)
		}
	}
	return nil, fmt.Errorf("objective %q, want one of %s", ft.Objective, objectiveList())
}

// sameObjective refuses to resume a fine-tune that saved settings saved
// with objective o: a built-in objective must be built from them equal
// to o (the same hyperparameters), another one have o's name.
func sameObjective(saved Config, o Objective) error {
	name := saved.Objective
	if name == "" {
		name = SFT
	}
	if string(name) != o.Name() {
		return fmt.Errorf("it optimises %s, this run %s; resume with the same objective", name, o.Name())
	}
	if r, ok := o.(configRecorder); ok {
		now := saved
		r.recordIn(&now)
		if key, was, is, err := saved.ResumeConflict(now, nil, 0); err != nil || key != "" {
			return fmt.Errorf("it optimises with %s %q, this run %q; resume with the same objective", key, was, is)
		}
		return nil
	}
	s, err := NewObjective(saved)
	if err != nil {
		return nil // not built in: the name is all that is known
	}
	if a, b := objectiveSettings(s), objectiveSettings(o); !reflect.DeepEqual(a, b) {
		return fmt.Errorf("it optimises %+v, this run %+v; resume with the same objective", a, b)
	}
	return nil
}

// configRecorder is an objective whose settings have fields of their own
// in Config: recordIn writes them there, so that the run folder's
// finetune.json holds the settings the objective trains with (defaults
// and a library caller's settings included) and a resume compares them.
type configRecorder interface{ recordIn(ft *Config) }

// objectiveSettings is what two objectives of one name must share to
// train alike: Settings() of an objective that holds state beside its
// settings (GRPOObjective's prompts), else the objective itself.
func objectiveSettings(o Objective) any {
	if s, ok := o.(interface{ Settings() any }); ok {
		return s.Settings()
	}
	return o
}
