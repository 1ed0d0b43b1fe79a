#!/usr/bin/env bash
# Regenerates tboard/tbpb/*.pb.go from TensorBoard's event.proto and the files
# it imports, as compiled into the pinned tensorboard wheel in .deps/py.
# Needs protoc (Debian: apt-get install protobuf-compiler) and protoc-gen-go
# at the version go.mod pins for google.golang.org/protobuf:
#   GOBIN=/tmp/bin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   PATH=/tmp/bin:$PATH scripts/tbproto/generate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
pkg=github.com/posttrainllm/posttrainllm/tboard/tbpb
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=$(.deps/py/bin/python scripts/tbproto/descriptors.py "$tmp/tensorboard.pb")
maps=""
for f in $files; do maps="$maps,M$f=$pkg;tbpb"; done
protoc --descriptor_set_in="$tmp/tensorboard.pb" --go_out="$tmp" --go_opt="paths=source_relative$maps" $files
rm -f tboard/tbpb/*.pb.go
for f in $files; do cp "$tmp/${f%.proto}.pb.go" tboard/tbpb/; done
