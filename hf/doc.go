// Package hf reads and writes Hugging Face model folders: config.json,
// model.safetensors or shards listed in model.safetensors.index.json, for
// GPT-2, the Llama-shaped families (Llama 2 and 3.x, Mistral, Qwen2,
// Qwen3, Phi-3) and Gemma 3 (Gemma3ForCausalLM). Import maps a folder's configuration onto model.Config
// and its tensors onto the model's named parameter list (transposing
// GPT-2's Conv1D weights, splitting its fused c_attn and Phi-3's fused
// qkv_proj and gate_up_proj); export writes the reverse, a folder that
// Hugging Face transformers loads as the class it was imported from.
// MLX-quantized folders (mlx_lm.convert -q) load dequantized (Load) or
// with their block projections kept packed (LoadQuantized), and
// SaveQuantized writes that layout back for mlx-lm.
//
// It also reads llama.cpp GGUF files of the llama, qwen2 and gemma3
// architectures (LoadGGUF): their metadata becomes the config.json of the
// folder they were converted from, their tensors that folder's tensors
// (dequantized from any of the legacy and K-quant types, q and k rows in
// Hugging Face's order), and their tokenizer.ggml.* metadata (byte-level
// BPE or a SentencePiece vocabulary) the folder's tokenizer files.
package hf
