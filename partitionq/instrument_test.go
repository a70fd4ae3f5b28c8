package partitionq_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/partitionq/partitionq/partitionq"
	"github.com/partitionq/partitionq/test/pgtest"
)

// TestTracingSpanPerHandlerCall gives a worker an OpenTelemetry SDK
// provider with an in-memory exporter and checks one span per handler call:
// its name, kind, scope, attributes, that the handler's ctx carries it, and
// the error and status of a failed call.
func TestTracingSpanPerHandlerCall(t *testing.T) {
	pgtest.EngineNeutral(t)
	t.Parallel()
	b := setup(t)
	b.group(t, 2)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) }) // in memory

	var mu sync.Mutex
	inCtx := map[int64]trace.SpanContext{} // event id: the span the handler's ctx carried
	h := partitionq.HandlerFunc(func(ctx context.Context, ev *partitionq.Event) error {
		mu.Lock()
		inCtx[ev.ID] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		if ev.Key == "bad" {
			return partitionq.DeadLetterNow(errBoom)
		}
		return nil
	})
	b.worker(t, partitionq.WorkerConfig{Handler: h, TracerProvider: tp})
	good, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "tenant-1", Type: "FileCreated", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := b.client.Send(b.ctx, "q", partitionq.Message{Key: "bad", Type: "FileDeleted", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, 60*time.Second, "two spans", func() (bool, error) { return len(exp.GetSpans()) >= 2, nil })

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans for 2 handler calls", len(spans))
	}
	byID := map[int64]tracetest.SpanStub{}
	for _, s := range spans {
		attrs := attribute.NewSet(s.Attributes...)
		v, _ := attrs.Value("messaging.message.id")
		id, _ := strconv.ParseInt(v.AsString(), 10, 64)
		byID[id] = s
	}
	for _, c := range []struct {
		id        int64
		key, typ  string
		errorText string // "" for a success
	}{{good.ID, "tenant-1", "FileCreated", ""}, {bad.ID, "bad", "FileDeleted", "dead letter: boom"}} {
		s, ok := byID[c.id]
		if !ok {
			t.Fatalf("no span for event %d", c.id)
		}
		slot, err := b.client.SlotOf(b.ctx, c.key, 2)
		if err != nil {
			t.Fatal(err)
		}
		if s.Name != "process q" || s.SpanKind != trace.SpanKindConsumer || s.InstrumentationScope.Name != partitionq.TracerName {
			t.Errorf("event %d: span %q kind %s scope %q, want \"process q\", consumer, %q", c.id, s.Name, s.SpanKind, s.InstrumentationScope.Name, partitionq.TracerName)
		}
		attrs := attribute.NewSet(s.Attributes...)
		for k, want := range map[attribute.Key]attribute.Value{
			"messaging.system":                   attribute.StringValue("partitionq"),
			"messaging.destination.name":         attribute.StringValue("q"),
			"messaging.consumer.group.name":      attribute.StringValue("g"),
			"messaging.destination.partition.id": attribute.StringValue(strconv.Itoa(slot)),
			"partitionq.key":                     attribute.StringValue(c.key),
			"partitionq.slot":                    attribute.IntValue(slot),
			"partitionq.event.type":              attribute.StringValue(c.typ),
			"partitionq.attempt":                 attribute.IntValue(1),
		} {
			if got, ok := attrs.Value(k); !ok || got != want {
				t.Errorf("event %d: attribute %s = %v, want %v", c.id, k, got.String(), want.String())
			}
		}
		mu.Lock()
		carried := inCtx[c.id]
		mu.Unlock()
		if carried.SpanID() != s.SpanContext.SpanID() || !carried.IsValid() {
			t.Errorf("event %d: the handler's ctx carried span %s, the span exported is %s", c.id, carried.SpanID(), s.SpanContext.SpanID())
		}
		if c.errorText == "" {
			if s.Status.Code != codes.Unset || len(s.Events) != 0 {
				t.Errorf("event %d succeeded, but its span has status %v and events %v", c.id, s.Status, s.Events)
			}
			continue
		}
		if s.Status.Code != codes.Error || s.Status.Description != c.errorText {
			t.Errorf("event %d failed, but its span has status %v, want Error %q", c.id, s.Status, c.errorText)
		}
		if len(s.Events) != 1 || s.Events[0].Name != "exception" {
			t.Fatalf("event %d failed, but its span's events are %v, want the recorded error", c.id, s.Events)
		}
		evAttrs := attribute.NewSet(s.Events[0].Attributes...)
		msg, _ := evAttrs.Value("exception.message")
		if msg.AsString() != c.errorText {
			t.Errorf("event %d: recorded error %q, want %q", c.id, msg.AsString(), c.errorText)
		}
		if dl, _ := attrs.Value("partitionq.dead_letter"); !dl.AsBool() {
			t.Errorf("event %d went to the dead letters, but its span does not say so", c.id)
		}
	}
}
