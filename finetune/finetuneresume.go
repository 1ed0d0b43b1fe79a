package finetune

import (
	"fmt"
	"slices"
)

// adapterShapeKeys are the settings a checkpoint's trainable arrays are
// shaped by: a resume under any other value cannot load them.
var adapterShapeKeys = []string{"method", "rank", "alpha", "targets", "quantize", "q_group_size"}

// ResumeConflict is the one rule for resuming a fine-tune with settings:
// c is what the fine-tune saved (finetune.json), given what a resume
// passes, and keys the settings given sets (finetune.json keys; nil for
// every one). It returns the first of them whose value differs, with the
// saved and the given value as a command line writes them; "" when none
// does. A context of 0 is the base's, baseContext. An unknown key is an
// error.
func (c Config) ResumeConflict(given Config, keys []string, baseContext int) (key, saved, want string, err error) {
	for _, k := range keys {
		if !knownSetting(k) {
			return "", "", "", fmt.Errorf("fine-tune setting %q, want a finetune.json key", k)
		}
	}
	for _, s := range savedSettings() {
		if keys != nil && !containsKey(keys, s.Key) {
			continue
		}
		if a, b := s.value(c, baseContext), s.value(given, baseContext); a != b {
			return s.Key, a, b, nil
		}
	}
	return "", "", "", nil
}

// containsKey reports whether keys holds k.
func containsKey(keys []string, k string) bool { return slices.Contains(keys, k) }

// knownSetting reports whether k is the key of a saved setting.
func knownSetting(k string) bool {
	s, ok := LookupSetting(k)
	return ok && s.saved
}
