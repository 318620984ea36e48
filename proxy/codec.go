package proxy

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// grpcBuffers backs the ext_proc server's protobuf codec. grpc's default
// pool has size classes that jump from 32 KiB to 1 MiB and zeroes a
// buffer's whole capacity on Get, so every ~33 KiB message of an 8k-token
// body cleared 1 MiB: the largest single cost of an exchange.
var grpcBuffers mem.BufferPool = new(bufferPool)

// bufferPool is a grpc mem.BufferPool with power-of-two classes from
// 256 B to 16 MiB. It does not zero buffers: the codec fills the length it
// asks for (decoding copies the message in, encoding writes it) and never
// reads past it.
type bufferPool struct {
	classes [17]sync.Pool // class c holds *[]byte of capacity 1<<(c+8)
}

// Get implements mem.BufferPool.
func (p *bufferPool) Get(n int) *[]byte {
	c := 0
	if n > 256 {
		c = bits.Len(uint(n-1)) - 8
	}
	if c >= len(p.classes) {
		b := make([]byte, n)
		return &b
	}
	if v, ok := p.classes[c].Get().(*[]byte); ok {
		*v = (*v)[:n]
		return v
	}
	b := make([]byte, n, 1<<(c+8))
	return &b
}

// Put implements mem.BufferPool.
func (p *bufferPool) Put(b *[]byte) {
	c := bits.Len(uint(cap(*b))) - 1 - 8 // the class whose size cap(*b) covers
	if c < 0 {
		return
	}
	if c >= len(p.classes) {
		c = len(p.classes) - 1
	}
	p.classes[c].Put(b)
}

// protoCodec is grpc's protobuf codec on grpcBuffers. proto.Unmarshal
// copies bytes fields, so messages never alias a recycled buffer.
type protoCodec struct{}

// Name implements encoding.CodecV2.
func (protoCodec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (protoCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto codec: %T is not a proto.Message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // safe: Size just ran
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := grpcBuffers.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		grpcBuffers.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, grpcBuffers)}, nil
}

// Unmarshal implements encoding.CodecV2.
func (protoCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("proto codec: %T is not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(grpcBuffers)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
