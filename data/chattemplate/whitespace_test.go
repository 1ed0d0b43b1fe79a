package chattemplate

import (
	"testing"
	"time"

	"github.com/posttrainllm/posttrainllm/data"
)

// whitespaceTemplates exercise whitespace control where it is easy to get
// wrong: stripping next to an expression, lstrip_blocks only at a line's
// start, trim_blocks after blocks and comments but not expressions, "+"
// markers, raw blocks, CRLF line ends, a trailing newline, tags in
// strings, unicode spaces, transformers' {% generation %} blocks.
var whitespaceTemplates = map[string]string{
	"glm":          "[gMASK]<sop>\n{%- set e = 'max' -%}\n{%- if true -%}<|system|>Reasoning Effort: {{ e | capitalize }}{%- endif -%}\n{{ messages[0].content }}",
	"expr-left":    "A: {{ messages[0].role }}{%- if true %} B{% endif %}",
	"expr-right":   "{% if true -%}{{ messages[0].role }} tail\n{%- endif %}",
	"expr-indent":  "x\n  {{ messages[0].role }}{% if true %}y{% endif %}\n",
	"trim-blocks":  "{% for m in messages %}\n{{ m.role }}\n{% endfor %}\n\nend\n",
	"expr-newline": "{% if true %}{{ 'a' }}\nnext{% endif %}",
	"lstrip":       "line\n    {% if true %}\n    in\n    {% endif %}\n  {# note #}\nafter  {% if true %}mid{% endif %}",
	"plus":         "a\n    {%+ if true %}b{% endif +%}\nc",
	"comments":     "x {#- drop -#}   y\n{# whole line #}\nz",
	"raw":          "{% raw %}{{ not }} {% this %}\n{% endraw %}\n  {%- raw -%}  keep  {%- endraw %} end",
	"crlf":         "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r",
	"trailing":     "one\n\n",
	"strings":      "{{ '%}' ~ \"}}\" ~ '-%}' }}{% set s = '{% x %}' %}{{ s }}",
	"unicode":      "a\u00a0 \u3000{%- if true %}b{% endif %}",
	"start":        "   {% if true %}x{% endif %}",
	"brace":        "{{ 'k' }}:{\n    {%- if true -%} v {%- endif %}}x{{ '{' }}{# c #}% y",
	"generation":   "{% for m in messages %}{% generation %}\n  {{ m.content }}\n{% endgeneration %}{% endfor %}",
	"var-minus":    "a   {{- messages[0].role -}}   b\n\n{{- 1 -}}\n",
}

// TestWhitespaceMatchesJinja2 renders whitespaceTemplates and compares
// with jinja2 under transformers' settings.
func TestWhitespaceMatchesJinja2(t *testing.T) {
	msgs := []data.Message{{Role: "user", Content: "hi"}}
	var names []string
	var cases []refCase
	for name, src := range whitespaceTemplates {
		names = append(names, name)
		cases = append(cases, refCase{src, msgs, false, "", "", testNow.Format("2006-01-02T15:04:05")})
	}
	ref := pythonRender(t, cases)
	for i, name := range names {
		if ref[i].Text == nil {
			t.Fatalf("%s: jinja2 fails: %s", name, ref[i].Error)
		}
		tpl, err := New(cases[i].Template, "", "")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		tpl.Now = func() time.Time { return testNow }
		got, err := tpl.Render(msgs, false)
		if err != nil || got != *ref[i].Text {
			t.Errorf("%s:\n got  %q (%v)\n want %q", name, got, err, *ref[i].Text)
		}
	}
}

// Unclosed tags and raw blocks are errors naming what is missing.
func TestWhitespaceErrors(t *testing.T) {
	for _, src := range []string{"a {{ b", "{% if 'x %}", "{% raw %} never ended", "{# open"} {
		if _, err := New(src, "", ""); err == nil {
			t.Errorf("%q compiled", src)
		}
	}
}
