package train

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/posttrainllm/posttrainllm/checkpoint"
)

// FuzzReadCheckpointState feeds arbitrary bytes to ParseRunState: it must
// never panic, and a state it accepts must survive a marshal/parse round
// trip unchanged (what SaveCheckpoint writes, a resume reads back).
func FuzzReadCheckpointState(f *testing.F) {
	valid := RunState{Format: checkpoint.Format, Step: 7, Config: tinyConfig(),
		SamplerState: []byte("PTLMSMP1\x00\x01"), TokensSeen: 896, ElapsedSeconds: 1.5}
	js, err := json.Marshal(valid)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(js)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"format":1,"step":-1}`))
	f.Add([]byte(`{"format":2,"step":1}`))
	f.Add([]byte(`{"format":1,"step":3,"config":{"model":{"vocab_size":256,"d_model":8,"layers":1,"heads":2,"context":4,"mlp_ratio":4,"dtype":"float32"}}}`))
	// A state.json of a build before eval_tokens, with eval_batches.
	f.Add([]byte(`{"format":1,"step":3,"config":{"model":{"vocab_size":256,"d_model":8,"layers":1,"heads":2,"context":4,"mlp_ratio":4,"dtype":"float32"},"batch":2,"eval_batches":3}}`))
	f.Add([]byte(`{"format":1,"unknown":true}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseRunState(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("accepted state does not marshal: %v", err)
		}
		st2, err := ParseRunState(again)
		if err != nil {
			t.Fatalf("re-marshalled state is rejected: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(st, st2) {
			t.Fatalf("round trip changed the state:\n%+v\n%+v", st, st2)
		}
	})
}
