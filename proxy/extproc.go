package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Names of the endpoint-picker protocol (Gateway API Inference Extension,
// proposal 004).
const (
	// DestinationHeader carries "ip:port[,fallback,…]" to Envoy.
	DestinationHeader = "x-gateway-destination-endpoint"
	// ServedKey is the key under DestinationNamespace in the ext_proc
	// request's metadata_context where Envoy reports the endpoint that
	// actually served the request ("ip:port"), which differs from the pick
	// after Envoy retried along the fallbacks.
	ServedKey = DestinationHeader + "-served"
	// ServedHeader is the response header of the same name, read as a
	// fallback when the metadata does not carry ServedKey.
	ServedHeader = ServedKey
	// DestinationNamespace is the dynamic-metadata namespace of the pick.
	DestinationNamespace = "envoy.lb"
	// SubsetNamespace and SubsetKey locate the gateway's subset hint in
	// the request's filter metadata: a list of "ip:port" strings.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// bodyChunk is the size of the body chunks streamed back to Envoy:
	// 60 KiB, under the protocol's 62,000-byte bound.
	bodyChunk = 60 << 10
)

// ExtProc is the Envoy ext_proc endpoint-picker server. Create it with
// NewExtProc and run it with Run.
//
// Per stream (one HTTP request): the request body is buffered until end
// of stream, parsed and scheduled; the answer sets DestinationHeader and
// DestinationNamespace metadata to the chosen endpoint followed by its
// fallbacks when Config.ExtProc.DestinationFallbacks is set. In
// FULL_DUPLEX_STREAMED mode the header answer waits for the body and the
// body is streamed back in chunks under 62,000 bytes; in BUFFERED mode
// headers are answered at once and the destination travels in the body
// answer. The response is observed (status, first byte, end of stream,
// trailers) to finish the decision, which is credited to the endpoint
// Envoy names as served (metadata_context DestinationNamespace/ServedKey,
// else the ServedHeader response header) when that is one of its
// candidates; a stream that ends early finishes it as cancelled. Errors end the stream with an
// ImmediateResponse (400, 404, 413, 429, 503) carrying an OpenAI-style
// JSON body. A protocol_config announcing request_body_mode STREAMED or
// BUFFERED_PARTIAL is refused with a 500 ImmediateResponse naming the
// mode: neither can carry a destination decided from the body. With
// request_body_mode NONE there is no body: the pick is made from the
// headers alone and answers them. Without protocol_config (an Envoy older
// than the field) full duplex is never assumed: Envoy then uses its
// filter's processing_mode, which trimtab cannot see, and a BUFFERED Envoy
// would wait for the headers answer while trimtab waited for the body.
// Such a stream is served as BUFFERED (headers answered at once, the pick
// made on the body message) and response messages are acknowledged
// without a streamed body; Config.ExtProc's modes apply only when they
// are not full-duplex-streamed. A body that then arrives in parts (a
// message without end_of_stream) is refused at once with a 500
// ImmediateResponse (protocol_config_missing): BUFFERED sends the body in
// one message, so Envoy streams it and would wait for it to come back.
// With a configured or announced BUFFERED mode the body message is the
// whole body even without end_of_stream (trailers follow), and the pick
// is made on it.
// observability_mode is not supported (answers are always sent).
type ExtProc struct {
	extprocv3.UnimplementedExternalProcessorServer

	cfg      Config
	sched    Scheduler
	parser   *Parser
	deps     Deps
	m        *pathMetrics
	health   *healthServer
	inflight atomic.Int64
	budget   bodyBudget
	mu       sync.Mutex
	ln       net.Listener
	tr       *tracer // nil: tracing off
}

// NewExtProc builds the server. cfg must be valid; deps.Scheduler is
// required. It registers trimtab_extproc_* metrics on deps.Registerer.
func NewExtProc(cfg Config, deps Deps) (*ExtProc, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Scheduler == nil {
		return nil, errors.New("proxy: NewExtProc needs Deps.Scheduler")
	}
	deps.defaults()
	e := &ExtProc{
		cfg:    cfg,
		sched:  deps.Scheduler,
		parser: NewParser(cfg.LoRAAdapters),
		deps:   deps,
		tr:     newTracer(deps.Tracer, deps.Scheduler),
		m:      newPathMetrics("extproc", deps.Registerer, deps.Scheduler.Pool, deps.Clock),
		health: newHealthServer(deps.Scheduler.Pool, extprocv3.ExternalProcessor_ServiceDesc.ServiceName),
		ln:     deps.Listener,
	}
	e.budget.limit = cfg.BodyMemoryBytes
	return e, nil
}

// Listen binds the listen address (or adopts Deps.Listener) and returns
// the bound address. Run calls it if needed.
func (e *ExtProc) Listen() (net.Addr, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ln, err := listen(e.ln, e.cfg.ExtProc.Addr)
	if err != nil {
		return nil, err
	}
	e.ln = ln
	return ln.Addr(), nil
}

// Run serves ExternalProcessor and grpc.health.v1 (services "", the
// ExternalProcessor service and HealthLiveness: SERVING; HealthReadiness:
// SERVING while an endpoint has fresh metrics) until ctx is cancelled,
// then reports NOT_SERVING, stops accepting streams, lets open ones finish
// for up to Config.DrainTimeout, cancels the rest and returns once every
// stream handler has returned.
func (e *ExtProc) Run(ctx context.Context) error {
	if _, err := e.Listen(); err != nil {
		return err
	}
	gs := grpc.NewServer(e.serverOptions()...)
	extprocv3.RegisterExternalProcessorServer(gs, e)
	healthpb.RegisterHealthServer(gs, e.health)
	hctx, hstop := context.WithCancel(ctx)
	hdone := make(chan struct{})
	go func() { e.health.run(hctx); close(hdone) }()
	defer func() { hstop(); <-hdone }()
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(e.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("proxy: ext_proc server: %w", err)
	case <-ctx.Done():
	}
	e.health.Shutdown()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	dctx, cancel := context.WithTimeout(context.Background(), e.cfg.DrainTimeout)
	defer cancel()
	select {
	case <-stopped:
	case <-dctx.Done():
		gs.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("proxy: ext_proc server: %w", err)
	}
	return nil
}

// serverOptions are the grpc server's options (shared with the benchmark,
// which adds an interceptor to time the server side).
func (e *ExtProc) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.WaitForHandlers(true),
		// Bodies over max_body_bytes must reach the handler to be answered
		// 413: grpc ends the stream with ResourceExhausted (a 500 at the
		// client) on a message over this limit.
		grpc.MaxRecvMsgSize(int(e.cfg.ExtProc.MessageLimit(e.cfg.MaxBodyBytes))),
		experimental.BufferPool(grpcBuffers),
		grpc.ForceServerCodecV2(protoCodec{}),
		// A 64 KiB read and write buffer per connection (grpc's default is
		// 32 KiB) holds a whole ~33 KiB message of an 8k-token body, which
		// saves about one read and, when the body is echoed, one write
		// system call per exchange.
		grpc.ReadBufferSize(64 << 10),
		grpc.WriteBufferSize(64 << 10),
	}
}

// Process implements ExternalProcessorServer: one stream per HTTP request.
func (e *ExtProc) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	x := exchangePool.Get().(*exchange)
	x.reset(e, srv)
	defer x.release()
	for {
		req, err := srv.Recv()
		if err != nil {
			x.abandon(err == io.EOF)
			if err == io.EOF || status.Code(err) == codes.Canceled || srv.Context().Err() != nil {
				return nil
			}
			return err
		}
		end, err := x.handle(req)
		if err != nil {
			x.abandon(false)
			return status.Errorf(codes.Unknown, "ext_proc: %v", err)
		}
		if end {
			return nil
		}
	}
}

type bodyMode uint8

const (
	modeDuplex bodyMode = iota
	modeBuffered
	modeStreamed // STREAMED / BUFFERED_PARTIAL: response side only, acknowledged chunk by chunk
	modeNone
)

func modeOf(s string) bodyMode {
	switch s {
	case BodyModeBuffered:
		return modeBuffered
	case BodyModeNone:
		return modeNone
	}
	return modeDuplex
}

func modeFromProto(m filterv3.ProcessingMode_BodySendMode) bodyMode {
	switch m {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		return modeDuplex
	case filterv3.ProcessingMode_BUFFERED:
		return modeBuffered
	case filterv3.ProcessingMode_NONE:
		return modeNone
	}
	return modeStreamed
}

// withoutProtocolConfig is the mode used for a configured mode m when
// Envoy announces none. Full duplex is never assumed then: a BUFFERED
// Envoy waits for the headers answer before it sends the body, so waiting
// for the body first would hang the request until Envoy's message_timeout.
// The request side is served as BUFFERED (headers answered at once, the
// pick made on the body message), the response side acknowledges each
// message without a streamed body, which every other mode accepts.
func withoutProtocolConfig(m bodyMode) bodyMode {
	if m == modeDuplex {
		return modeBuffered
	}
	return m
}

// unsupportedBodyMode is the answer to a request_body_mode the destination
// cannot be returned in: STREAMED and BUFFERED_PARTIAL send the headers on
// before the body that decides the pick has arrived, and Envoy applies a
// header mutation on a body answer only in BUFFERED mode. Refusing beats
// routing every request without a destination. Only misconfiguration
// reaches it, so it may allocate.
func unsupportedBodyMode(m filterv3.ProcessingMode_BodySendMode) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "unsupported_body_mode",
		Message: "ext_proc request_body_mode " + m.String() + " is not supported: the destination is chosen from the body " +
			"and can only be returned in BUFFERED or FULL_DUPLEX_STREAMED mode; set Envoy's processing_mode.request_body_mode to one of them"}
}

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}
