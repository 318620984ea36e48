// Package replicapb is the generated code of the replica sync protocol
// (replica.proto). Regenerate with protoc, protoc-gen-go and
// protoc-gen-go-grpc on the PATH:
//
//	go generate ./replica/replicapb
//
// replica.pb.go is over the house limit of 500 lines and stays one file:
// protoc-gen-go writes it whole from replica.proto, and a hand split would
// be undone by the next go generate.
package replicapb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative replica.proto
