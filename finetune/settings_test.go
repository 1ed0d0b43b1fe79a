package finetune

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/posttrainllm/posttrainllm/train"
)

// Every finetune.json key is a saved setting's and every saved setting a
// finetune.json key, so a new Config field cannot miss its flag; keys and
// flags are unique.
func TestSettingsCoverConfig(t *testing.T) {
	var jsonKeys []string
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		name, _, _ := strings.Cut(ct.Field(i).Tag.Get("json"), ",")
		if name != "-" {
			jsonKeys = append(jsonKeys, name)
		}
	}
	var saved []string
	keys, flags := map[string]bool{}, map[string]bool{}
	for _, s := range Settings() {
		if keys[s.Key] || flags[s.Flag] {
			t.Errorf("setting %s (--%s) declared twice", s.Key, s.Flag)
		}
		keys[s.Key], flags[s.Flag] = true, true
		if s.saved {
			saved = append(saved, s.Key)
		}
	}
	slices.Sort(jsonKeys)
	slices.Sort(saved)
	if !slices.Equal(jsonKeys, saved) {
		t.Errorf("saved settings %v, want finetune.json's keys %v", saved, jsonKeys)
	}
}

// A request whose fields hold the settings' defaults is a LoRA fine-tune
// of the attention projections, rank 8, alpha 16, prompts masked, the
// supervised loss: each Default is of its Field's type.
func TestSettingsDefaults(t *testing.T) {
	var r Request
	for _, s := range Settings() {
		reflect.ValueOf(s.Field(&r)).Elem().Set(reflect.ValueOf(s.Default))
	}
	want := loraSettings("")
	if !reflect.DeepEqual(r.Settings, want) || r.From != "" || r.Resume != "" || r.Epochs != 0 {
		t.Errorf("defaults %+v, want %+v", r, want)
	}
}

// Given records a saved setting in Set, epochs and steps in their flags,
// and nothing else.
func TestRequestGiven(t *testing.T) {
	var r Request
	for _, k := range []string{"rank", "resume", "group_size", "epochs", "steps", "lr", "base"} {
		r.Given(k)
	}
	if !slices.Equal(r.Set, []string{"rank", "group_size", "base"}) || !r.EpochsSet || !r.StepsSet {
		t.Errorf("given: %+v, want Set [rank group_size base], epochs and steps", r)
	}
}

// A reason names its settings apart from its words: by their keys in
// Error, as the caller names them in Text.
func TestReasonNamesSettings(t *testing.T) {
	err := Plan{Checkpoint: "/run/ck", Step: 4}.CheckRun(train.Config{Steps: 4})
	se, ok := err.(*SettingError)
	if !ok {
		t.Fatalf("CheckRun at the last step: %v, want a SettingError", err)
	}
	if !strings.Contains(se.Error(), "pass steps N with N > 4") {
		t.Errorf("Error %q does not name steps by its key", se.Error())
	}
	flag := se.Reason.Text(func(key string) string { return "--" + key })
	if !strings.Contains(flag, "pass --steps N with N > 4") || strings.Contains(flag, "%!") {
		t.Errorf("Text %q does not name steps as asked", flag)
	}
}
