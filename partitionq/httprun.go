package partitionq

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTPFailedIndexHeader is the response header by which an endpoint that
// fails a run (HTTPHandler.HandleRun: a status other than 2xx) names the
// first event of the run not done, by its index in the request's array
// (from 0): the events before it are done, it failed (HTTPOutcomeHeader
// and Retry-After apply to it), the events after it are not done. Without
// it, the run's first event failed.
const HTTPFailedIndexHeader = "Partitionq-Failed-Index"

// ctBatch is the content type of a run's request: CloudEvents' JSON batch
// format.
var ctBatch = []string{"application/cloudevents-batch+json"}

// ceStructured is one event of a run's request: a CloudEvent in the JSON
// format (structured mode), with the attributes of the binary mode's
// ce-* headers as its members, and the payload as "data": the JSON itself
// when it is JSON (datacontenttype application/json), else a string
// (text/plain; charset=utf-8).
type ceStructured struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Time            string          `json:"time,omitempty"`
	Subject         string          `json:"subject,omitempty"`
	Slot            string          `json:"partitionqslot"`
	Slots           string          `json:"partitionqslots"`
	Epoch           string          `json:"partitionqepoch"`
	Fence           string          `json:"partitionqfence"`
	Attempt         string          `json:"partitionqattempt"`
	DataContentType string          `json:"datacontenttype,omitempty"`
	Data            json.RawMessage `json:"data,omitempty"`
}

func structured(ev *Event) ceStructured {
	ce := ceStructured{SpecVersion: "1.0", ID: strconv.FormatInt(ev.ID, 10), Source: "/partitionq/" + ev.Queue + "/" + ev.Group,
		Type: ev.Type, Subject: ev.Key, Slot: strconv.Itoa(ev.Slot), Slots: strconv.Itoa(ev.Slots),
		Epoch: strconv.FormatInt(ev.Epoch, 10), Fence: ev.Fence(), Attempt: strconv.Itoa(ev.Attempt)}
	if ce.Type == "" {
		ce.Type = HTTPUntypedType
	}
	if !ev.Time.IsZero() {
		ce.Time = ev.Time.UTC().Format(time.RFC3339Nano)
	}
	switch {
	case len(ev.Payload) == 0:
	case json.Valid(ev.Payload):
		ce.DataContentType, ce.Data = ctJSON[0], ev.Payload
	default:
		text, _ := json.Marshal(string(ev.Payload)) // a string cannot fail
		ce.DataContentType, ce.Data = ctText[0], text
	}
	return ce
}

// HandleRun posts a run of events of one key (a RunHandler's) as one
// request in the CloudEvents JSON batch format: Content-Type
// application/cloudevents-batch+json, the body a JSON array of the events
// in structured mode, in order, each with the attributes HTTPHandler's
// binary mode sends as headers (docs/handlers.md). Any 2xx means every
// event is done. Any other status fails the run at its first event, or at
// the event HTTPFailedIndexHeader names (the events before it are done);
// HTTPOutcomeHeader and Retry-After say what becomes of the failed event,
// as for one event. ctx governs the request.
func (h *HTTPHandler) HandleRun(ctx context.Context, evs []*Event) error {
	ces := make([]ceStructured, len(evs))
	for i, ev := range evs {
		ces[i] = structured(ev)
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ces); err != nil {
		return err
	}
	p := body.Bytes()
	req := (&http.Request{Method: http.MethodPost, URL: h.url, Host: h.url.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": ctBatch, "User-Agent": httpUserAgent}, ContentLength: int64(len(p)),
		Body: io.NopCloser(bytes.NewReader(p)), GetBody: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(p)), nil },
	}).WithContext(ctx)
	if h.authorize != nil {
		if err := h.authorize(req); err != nil {
			return fmt.Errorf("authorize the request: %w", err)
		}
	}
	resp, err := h.rt.RoundTrip(req)
	if err != nil {
		return &url.Error{Op: "Post", URL: h.url.Redacted(), Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		io.CopyN(io.Discard, resp.Body, httpDrainMax)
		return nil
	}
	failure := httpFailure(resp)
	v := resp.Header.Get(HTTPFailedIndexHeader)
	if v == "" {
		return failure
	}
	i, perr := strconv.Atoi(strings.TrimSpace(v))
	switch {
	case perr != nil || i < 0 || i >= len(evs):
		return fmt.Errorf("%w (%s: %s is not the index of an event of the run of %d: its first event failed)",
			failure, HTTPFailedIndexHeader, strconv.Quote(clip(v, 64)), len(evs))
	case i == 0:
		return failure
	}
	return RunFailed(i, failure)
}
