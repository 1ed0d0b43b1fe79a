package hf

import (
	"testing"

	"github.com/posttrainllm/posttrainllm/internal/realmodel"
)

// A published model's folder (SmolLM2-135M-Instruct, Llama architecture,
// converted from its GGUF file by an independent script) maps onto the
// config it describes, gives the numpy reference's logits, and exports
// the tensors it was imported from, importing back bit for bit.
func TestRealLlamaFolderMatchesReference(t *testing.T) {
	dir := realmodel.Folder(t)
	cfg, family, err := ReadConfig(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if family != Llama || cfg.Layers != 30 || cfg.DModel != 576 || cfg.Heads != 9 || cfg.KVHeadCount() != 3 ||
		cfg.VocabSize != 49152 || !cfg.TiedEmbeddings || cfg.RoPEBase != 100000 || cfg.HeadDim() != 64 || cfg.QKVBias {
		t.Fatalf("%s mapped to %s %+v", dir, family, cfg)
	}
	checkAgainstReference(t, dir, Llama, []int32{1, 504, 3458, 282, 253, 1345, 28, 2, 9690, 30, 17, 48000})
}
