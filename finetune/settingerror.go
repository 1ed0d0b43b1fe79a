package finetune

import (
	"fmt"
	"slices"
)

// SettingError is a setting of a Request that NewPlan or Plan.CheckRun
// refuses. Setting names it by its key: a Setting's (base, train, valid,
// method, quantize, context, resume, epochs ...), or steps or optimizer,
// the run's. Value is the value given ("" for one that is missing), With
// the setting it conflicts with, its key and then, after a space, its
// value when that matters ("steps", "objective sft"; "" for none), and
// Reason what was expected.
type SettingError struct {
	Setting, Value, With string
	Reason               Reason
	// Missing reports a setting the request needs and lacks.
	Missing bool
}

// Error says which setting, its value and what was expected, naming
// settings by their keys.
func (e *SettingError) Error() string {
	if e.Missing {
		return fmt.Sprintf("a fine-tune needs %s: %s", e.Setting, e.Reason)
	}
	s := "invalid " + e.Setting
	if e.Value != "" {
		s += " " + e.Value
	}
	if e.With != "" {
		s += " with " + e.With
	}
	return s + ": " + e.Reason.String()
}

// Reason says why a setting was refused. The settings it names are held
// apart from its words, by their keys, so that each caller names them
// its own way: Error by their keys, a command line by its flags
// (Setting.Flag).
type Reason struct {
	format string
	args   []any // a settingKey among them is a setting the reason names
}

// settingKey is an argument of a Reason that names a setting by its key.
type settingKey string

// reason is the Reason fmt.Sprintf(format, args...) words, where a
// settingKey argument names a setting.
func reason(format string, args ...any) Reason { return Reason{format: format, args: args} }

// Text is the reason with each setting it names written as name(key).
func (r Reason) Text(name func(key string) string) string {
	args := slices.Clone(r.args)
	for i, a := range args {
		if k, ok := a.(settingKey); ok {
			args[i] = name(string(k))
		}
	}
	return fmt.Sprintf(r.format, args...)
}

// String is the reason with the settings it names written as their keys.
func (r Reason) String() string { return r.Text(func(key string) string { return key }) }

// settingErr is a SettingError of setting with value and the reason
// format and args word (reason).
func settingErr(setting, value, format string, args ...any) *SettingError {
	return &SettingError{Setting: setting, Value: value, Reason: reason(format, args...)}
}
