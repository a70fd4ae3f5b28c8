package partitionq

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/partitionq/partitionq/partitionq/internal/runner"
)

// TracerName is the name of the tracer a worker takes from
// WorkerConfig.TracerProvider (the instrumentation scope of its spans).
const TracerName = "github.com/partitionq/partitionq/partitionq"

// The attributes of a handler span. The messaging.* keys are OpenTelemetry's
// semantic conventions for messaging; the partitionq.* ones have none.
const (
	attrSystem      = attribute.Key("messaging.system")
	attrOperation   = attribute.Key("messaging.operation.name")
	attrOpType      = attribute.Key("messaging.operation.type")
	attrQueue       = attribute.Key("messaging.destination.name")
	attrGroup       = attribute.Key("messaging.consumer.group.name")
	attrPartition   = attribute.Key("messaging.destination.partition.id")
	attrEventID     = attribute.Key("messaging.message.id")
	attrKey         = attribute.Key("partitionq.key")
	attrSlot        = attribute.Key("partitionq.slot")
	attrType        = attribute.Key("partitionq.event.type")
	attrAttempt     = attribute.Key("partitionq.attempt")
	attrDeadLetter  = attribute.Key("partitionq.dead_letter")
	attrRunEvents   = attribute.Key("partitionq.run.events")
	attrRunFailed   = attribute.Key("partitionq.run.failed_index")
	spanNamePrefix  = "process "
	messagingSystem = "partitionq"
)

// instrument wraps h with the worker's metrics (a duration observation per
// call) and tracing (a span per call, whose context is the handler's ctx).
// With neither configured it returns h itself: no cost at all.
func (w *Worker) instrument(m *workerMetrics, h runner.Handler) runner.Handler {
	var tr trace.Tracer
	if w.cfg.TracerProvider != nil {
		tr = w.cfg.TracerProvider.Tracer(TracerName, trace.WithInstrumentationVersion(Version))
	}
	switch {
	case m == nil && tr == nil:
		return h
	case tr == nil:
		return func(ctx context.Context, c runner.Call) runner.Result {
			start := time.Now()
			defer func() { m.observe(c.Slot, time.Since(start)) }() // a panic is a call too
			return h(ctx, c)
		}
	}
	name := spanNamePrefix + w.cfg.Queue
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)} // made once: no allocation per call
	return func(ctx context.Context, c runner.Call) (res runner.Result) {
		ctx, span := tr.Start(ctx, name, opts...)
		if span.IsRecording() { // the attributes cost allocations: only for a span that is kept
			span.SetAttributes(w.spanAttributes(c)...)
		}
		var start time.Time
		if m != nil {
			start = time.Now()
		}
		panicked := true
		defer func() {
			if m != nil {
				m.observe(c.Slot, time.Since(start))
			}
			switch {
			case panicked:
				span.SetStatus(codes.Error, "handler panicked")
			case res.Err != nil:
				span.RecordError(res.Err)
				span.SetStatus(codes.Error, res.Err.Error())
				if res.DeadLetter {
					span.SetAttributes(attrDeadLetter.Bool(true))
				}
			}
			span.End()
		}()
		res = h(ctx, c)
		panicked = false
		return res
	}
}

func (w *Worker) spanAttributes(c runner.Call) []attribute.KeyValue {
	return []attribute.KeyValue{
		attrSystem.String(messagingSystem),
		attrOperation.String("process"),
		attrOpType.String("process"),
		attrQueue.String(w.cfg.Queue),
		attrGroup.String(w.cfg.Group),
		attrPartition.String(strconv.Itoa(c.Slot)),
		attrEventID.String(strconv.FormatInt(c.Event.ID, 10)),
		attrKey.String(c.Event.Key),
		attrSlot.Int(c.Slot),
		attrType.String(c.Event.Type),
		attrAttempt.Int(c.Attempt),
	}
}

// instrumentRun is instrument for a run handler: one duration observation
// and one observation of the run's events per call, and one span per run,
// with the run's first event's attributes (its id, key, slot, type and
// attempt) and its number of events (partitionq.run.events); a run that
// fails records the index of its failed event (partitionq.run.failed_index).
func (w *Worker) instrumentRun(m *workerMetrics, h runner.RunHandler) runner.RunHandler {
	var tr trace.Tracer
	if w.cfg.TracerProvider != nil {
		tr = w.cfg.TracerProvider.Tracer(TracerName, trace.WithInstrumentationVersion(Version))
	}
	switch {
	case m == nil && tr == nil:
		return h
	case tr == nil:
		return func(ctx context.Context, c runner.RunCall) runner.RunResult {
			start := time.Now()
			defer func() { m.observeRun(c.Slot, time.Since(start), len(c.Events)) }() // a panic is a call too
			return h(ctx, c)
		}
	}
	name := spanNamePrefix + w.cfg.Queue
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	return func(ctx context.Context, c runner.RunCall) (res runner.RunResult) {
		ctx, span := tr.Start(ctx, name, opts...)
		if span.IsRecording() {
			first := runner.Call{Event: c.Events[0], N: c.N, Slot: c.Slot, Epoch: c.Epoch, Batch: c.Batch, Attempt: c.Attempts[0]}
			span.SetAttributes(append(w.spanAttributes(first), attrRunEvents.Int(len(c.Events)))...)
		}
		var start time.Time
		if m != nil {
			start = time.Now()
		}
		panicked := true
		defer func() {
			if m != nil {
				m.observeRun(c.Slot, time.Since(start), len(c.Events))
			}
			switch {
			case panicked:
				span.SetStatus(codes.Error, "handler panicked")
			case res.Done < len(c.Events):
				span.RecordError(res.Failed.Err)
				span.SetStatus(codes.Error, errString(res.Failed.Err))
				span.SetAttributes(attrRunFailed.Int(res.Done))
				if res.Failed.DeadLetter {
					span.SetAttributes(attrDeadLetter.Bool(true))
				}
			}
			span.End()
		}()
		res = h(ctx, c)
		panicked = false
		return res
	}
}
