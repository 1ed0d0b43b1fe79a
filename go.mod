module github.com/posttrainllm/posttrainllm

go 1.26

require (
	github.com/dlclark/regexp2/v2 v2.5.1 // indirect
	github.com/tiktoken-go/tokenizer v0.10.0 // indirect
)
