package partitionq

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The HTTP handler (docs/handlers.md) posts each event to an endpoint in
// the CloudEvents 1.0 HTTP binding, binary mode: the payload is the request
// body, byte for byte, and the event's attributes are headers. Binary mode
// because the payload is the producer's text, often JSON but not always:
// it reaches the endpoint unchanged, with no envelope to decode, and the
// endpoint's framework reads it as any request body.
const (
	// HTTPMaxConnsDefault is HTTPHandlerConfig.MaxConns's default.
	HTTPMaxConnsDefault = 64
	// HTTPOutcomeHeader is the response header by which an endpoint that
	// fails an event (a status other than 2xx) asks for more than a retry:
	// "dead-letter" makes the event a dead letter at once (DeadLetterNow).
	HTTPOutcomeHeader = "Partitionq-Outcome"
	// HTTPUntypedType is the CloudEvents type of an event sent without a
	// type (CloudEvents requires one).
	HTTPUntypedType = "partitionq.untyped"
)

// Bounds on what the HTTP handler reads of a response: the error text of
// a failure is the start of its body (as much as the end of a --exec
// command's standard error), and at most httpDrainMax bytes are read of any
// body, so that the connection can carry the next request; a longer body
// is not read on: its connection is closed instead.
//
// A connection idle for httpIdleConnTimeout is closed: before the servers'
// own idle timeouts (2 s for gunicorn, 5 s for Node.js and uvicorn), so
// that a request is not sent on a connection the server is closing, which
// would fail it (a POST is not sent again by itself).
const (
	httpErrorBody       = 4 << 10
	httpDrainMax        = 64 << 10
	httpMaxHeaderBytes  = 64 << 10
	httpIdleConnTimeout = time.Second
)

// HTTPHandlerConfig configures NewHTTPHandler. Zero values mean the
// defaults.
type HTTPHandlerConfig struct {
	// URL receives each event as a POST. Required: an absolute http or
	// https URL, without credentials (give them with Authorize).
	URL string

	// MaxConns is how many connections to the URL's host the handler keeps
	// open between requests. Requests are never made to wait for a
	// connection; MaxConns only decides how many stay open for reuse: make
	// it as many as the requests the worker has in flight at most (the
	// slots it runs times Limits.Concurrency, plus Limits.DrainConcurrency),
	// or requests beyond it open and close a connection each. Ignored with
	// Transport. Defaults to HTTPMaxConnsDefault (64).
	MaxConns int

	// TLS configures the connections to an https URL: the CAs to trust
	// (RootCAs), a client certificate (Certificates), the server name.
	// Ignored with Transport. Defaults to nil: the system's CAs, no client
	// certificate.
	TLS *tls.Config

	// Authorize, when set, is called with every request before it is sent,
	// to add credentials (req.SetBasicAuth, or an Authorization header with
	// a bearer token). An error fails the event. It must be safe for
	// concurrent use. Defaults to nil: no credentials.
	Authorize func(req *http.Request) error

	// Transport, when set, sends the requests in place of the handler's
	// own transport (an instrumented one, say); MaxConns and TLS are then
	// the caller's business. Redirects are never followed either way.
	// Defaults to nil: an http.Transport of the handler's own, keeping
	// MaxConns connections, with TLS, no proxy and no compression.
	Transport http.RoundTripper
}

// HTTPHandler is a Handler that posts each event to an HTTP endpoint (a
// sidecar in any language) as a CloudEvent, over kept-alive connections,
// as many requests at once as the worker runs handlers. It is a
// RunHandler too: HandleRun posts a run of a key's events as one
// CloudEvents batch. Make one with NewHTTPHandler. It is safe for
// concurrent use.
//
// The request (docs/handlers.md gives every header):
//
//	POST URL
//	ce-specversion: 1.0
//	ce-id: 4711                              the event id
//	ce-source: /partitionq/files/indexer     the queue and the group
//	ce-type: FileCreated                     the type (partitionq.untyped for none)
//	ce-time: 2024-05-01T09:57:59.123456Z
//	ce-subject: tenant-42                    the key, percent-encoded (absent for an empty key)
//	ce-partitionqslot: 1                     the slot, of ce-partitionqslots
//	ce-partitionqslots: 4
//	ce-partitionqepoch: 17                   the fencing token (Event.Epoch)
//	ce-partitionqfence: files/indexer/4/1/17 Event.Fence, for partitionq.fence in SQL
//	ce-partitionqattempt: 1
//	Content-Type: application/json           text/plain; charset=utf-8 for a payload that is not JSON
//
//	{"path":"/a"}                            the payload
//
// The response: any 2xx is done. Anything else is a failure, handled by
// the worker's policy, with the status and the start of the body as its
// error text; with "Partitionq-Outcome: dead-letter" the event is a dead
// letter at once, and with a Retry-After header (seconds, or an HTTP date)
// its next attempt is after that delay instead of the backoff. A request
// that cannot be sent (connection refused, a reset, the handler timeout)
// is a failure too. The request's context is the handler's: when the
// handler timeout passes or the worker loses the slot, the request is
// cancelled and its connection closed.
type HTTPHandler struct {
	url       *url.URL
	rt        http.RoundTripper // requests go straight to it: no redirect is followed, no cookie kept
	authorize func(*http.Request) error
	own       *http.Transport // the handler's own transport, nil with Transport
}

// NewHTTPHandler checks cfg and makes an HTTPHandler. Close it when the
// worker has stopped.
func NewHTTPHandler(cfg HTTPHandlerConfig) (*HTTPHandler, error) {
	if err := checkHTTPURL(cfg.URL); err != nil {
		return nil, err
	}
	if cfg.MaxConns < 0 {
		return nil, &ValidationError{Field: "HTTPHandlerConfig.MaxConns", Value: strconv.Itoa(cfg.MaxConns), Problem: "it is negative",
			Fix: fmt.Sprintf("give the requests in flight at most, or 0 for %d", HTTPMaxConnsDefault)}
	}
	u, _ := url.Parse(cfg.URL) // checked above
	h := &HTTPHandler{url: u, authorize: cfg.Authorize, rt: cfg.Transport}
	if h.rt == nil {
		n := cfg.MaxConns
		if n == 0 {
			n = HTTPMaxConnsDefault
		}
		dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		h.own = &http.Transport{
			DialContext:            dialer.DialContext,
			TLSClientConfig:        cfg.TLS,
			TLSHandshakeTimeout:    10 * time.Second,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           n,
			MaxIdleConnsPerHost:    n,
			IdleConnTimeout:        httpIdleConnTimeout,
			DisableCompression:     true,
			MaxResponseHeaderBytes: httpMaxHeaderBytes,
		}
		h.rt = h.own
	}
	return h, nil
}

func checkHTTPURL(raw string) error {
	bad := func(problem, fix string) error {
		return &ValidationError{Field: "HTTPHandlerConfig.URL", Value: shorten(raw), Problem: problem, Fix: fix}
	}
	if raw == "" {
		return bad("it is empty", "give the URL that receives the events, e.g. http://127.0.0.1:8080/events")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("it is not a URL", "give an absolute http or https URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("it is not an http or https URL", "give an absolute http or https URL, e.g. http://127.0.0.1:8080/events")
	case u.Host == "":
		return bad("it names no host", "give an absolute URL, e.g. http://127.0.0.1:8080/events")
	case u.User != nil:
		return bad("it holds credentials", "take them out of the URL and give them with HTTPHandlerConfig.Authorize (partitionq work: --http-config or the environment)")
	}
	return nil
}

// Close closes the idle connections of the handler's own transport. Call
// it once the worker has stopped.
func (h *HTTPHandler) Close() {
	if h.own != nil {
		h.own.CloseIdleConnections()
	}
}

// One value per header shared by every request (the transport only reads
// them).
var (
	ceSpecVersion = []string{"1.0"}
	ceUntypedType = []string{HTTPUntypedType}
	ctJSON        = []string{"application/json"}
	ctText        = []string{"text/plain; charset=utf-8"}
	httpUserAgent = []string{"partitionq/" + Version}
)

// Handle posts ev and reads the outcome from the response (see
// HTTPHandler). ctx governs the request.
func (h *HTTPHandler) Handle(ctx context.Context, ev *Event) error {
	req := (&http.Request{Method: http.MethodPost, URL: h.url, Host: h.url.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, 16), ContentLength: int64(len(ev.Payload))}).WithContext(ctx)
	if len(ev.Payload) > 0 {
		p := ev.Payload
		req.Body = io.NopCloser(bytes.NewReader(p))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(p)), nil }
	} else {
		req.Body = http.NoBody
	}
	setCloudEventHeaders(req.Header, ev)
	if h.authorize != nil {
		if err := h.authorize(req); err != nil {
			return fmt.Errorf("authorize the request: %w", err)
		}
	}
	// Straight to the transport: a redirect comes back as a failure
	// (credentials never follow one elsewhere).
	resp, err := h.rt.RoundTrip(req)
	if err != nil {
		return &url.Error{Op: "Post", URL: h.url.Redacted(), Err: err} // "Post \"URL\": dial tcp ...: connection refused"; the handler timeout is the runner's to say
	}
	defer resp.Body.Close() // a body longer than read below is not read on: the connection is closed
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		io.CopyN(io.Discard, resp.Body, httpDrainMax)
		return nil
	}
	return httpFailure(resp)
}

// setCloudEventHeaders writes ev's CloudEvents attributes (binary mode)
// into a new request's headers, in their canonical form.
func setCloudEventHeaders(hd http.Header, ev *Event) {
	// One array holds every value of the event's own.
	v := make([]string, 0, 10)
	one := func(s string) []string {
		v = append(v, s)
		return v[len(v)-1 : len(v) : len(v)]
	}
	hd["Ce-Specversion"] = ceSpecVersion
	hd["Ce-Id"] = one(strconv.FormatInt(ev.ID, 10))
	hd["Ce-Source"] = one("/partitionq/" + ev.Queue + "/" + ev.Group)
	if ev.Type == "" {
		hd["Ce-Type"] = ceUntypedType
	} else {
		hd["Ce-Type"] = one(ceEscape(ev.Type))
	}
	if !ev.Time.IsZero() {
		hd["Ce-Time"] = one(ev.Time.UTC().Format(time.RFC3339Nano))
	}
	if ev.Key != "" {
		hd["Ce-Subject"] = one(ceEscape(ev.Key))
	}
	hd["Ce-Partitionqslot"] = one(strconv.Itoa(ev.Slot))
	hd["Ce-Partitionqslots"] = one(strconv.Itoa(ev.Slots))
	hd["Ce-Partitionqepoch"] = one(strconv.FormatInt(ev.Epoch, 10))
	hd["Ce-Partitionqfence"] = one(ev.Fence())
	hd["Ce-Partitionqattempt"] = one(strconv.Itoa(ev.Attempt))
	hd["User-Agent"] = httpUserAgent
	if len(ev.Payload) > 0 {
		if json.Valid(ev.Payload) {
			hd["Content-Type"] = ctJSON
		} else {
			hd["Content-Type"] = ctText
		}
	}
}

// ceEscape percent-encodes a CloudEvents attribute for an HTTP header, as
// the HTTP binding says: space, '"', '%' and every byte outside printable
// ASCII, as %XX of its UTF-8 bytes.
func ceEscape(s string) string {
	i := 0
	for i < len(s) && !ceNeedsEscape(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		if ceNeedsEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func ceNeedsEscape(c byte) bool { return c <= ' ' || c > '~' || c == '"' || c == '%' }

// httpFailure reads a failure's outcome from a response that is not 2xx:
// its error text (the status and the start of the body), a dead letter now
// (HTTPOutcomeHeader), a retry after a delay (Retry-After).
func httpFailure(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, httpErrorBody))
	io.CopyN(io.Discard, resp.Body, httpDrainMax-httpErrorBody)
	msg := "HTTP " + resp.Status
	if t := errorText(body); t != "" {
		msg += ": " + t
	}
	switch o := resp.Header.Get(HTTPOutcomeHeader); o {
	case "":
	case "dead-letter":
		return DeadLetterNow(errors.New(msg))
	default:
		msg += fmt.Sprintf(" (%s: %s is not an outcome partitionq knows (dead-letter): a failure)", HTTPOutcomeHeader, strconv.Quote(clip(o, 64)))
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		d, err := parseRetryAfter(ra, time.Now())
		if err == nil {
			return RetryAfter(d, errors.New(msg))
		}
		msg += fmt.Sprintf(" (Retry-After %s: %v: retried after the backoff)", strconv.Quote(clip(ra, 64)), err)
	}
	return errors.New(msg)
}

// parseRetryAfter reads a Retry-After header: seconds (a whole number, as
// HTTP says, or a decimal one) or an HTTP date. A delay of 0, or a date
// past, means at once (one millisecond).
func parseRetryAfter(v string, now time.Time) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(secs) || secs < 0 || secs > float64(math.MaxInt64/int64(time.Second)) {
			return 0, errors.New("not a delay in seconds")
		}
		return max(time.Duration(secs*float64(time.Second)), time.Millisecond), nil
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, errors.New("neither seconds nor an HTTP date")
	}
	return max(t.Sub(now), time.Millisecond), nil
}

// errorText is a body as an error text PostgreSQL can store: valid UTF-8
// without NUL bytes, without surrounding white space.
func errorText(b []byte) string {
	s := strings.ToValidUTF8(string(b), "")
	s = strings.ReplaceAll(s, "\x00", "")
	return strings.TrimSpace(s)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
