package providers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"
)

// A Chat Completions request goes straight to the provider's transport,
// with the URL and headers the SDK's client sets for it taken once per
// key from the client itself (openAIEndpoint). Through client.Post every
// call in flight kept the SDK's request config, two copies of its
// request and three of its headers (its own, the attempt's clone,
// http.Client's copy for redirects): ~5.5 KB per call waiting for its
// answer (docs/performance.md, memory per call in flight). What goes on
// the wire is unchanged (TestOpenAIRequestOnTheWire), a failed answer is
// the *openai.Error the SDK makes, a transport error the *url.Error
// http.Client makes.
//
// The SDK's client is still used where this would differ: an
// http.Client with more than a transport (a timeout, a cookie jar, a
// redirect policy), a base URL with a user in it (http.Client sends it as
// Basic auth when the request carries no Authorization; a transport does
// not), and a provider that answered a redirect, which is followed as the
// SDK follows it from then on (the answer that redirected is dropped and
// the attempt made again).

// openAIEndpoint is what every request of one provider and key sends
// besides its body. Nothing writes to it once made.
type openAIEndpoint struct {
	url    *url.URL
	host   string
	header http.Header
}

// errEndpointTaken ends the request that captured an endpoint before it
// is sent.
var errEndpointTaken = errors.New("providers: endpoint taken")

// endpoint is the endpoint of key ("" = the client's own), captured from
// the SDK's client on first use.
func (p *openAIProvider) endpoint(ctx context.Context, key string) (*openAIEndpoint, error) {
	if e, ok := p.endpoints.Load(key); ok {
		return e.(*openAIEndpoint), nil
	}
	var e *openAIEndpoint
	capture := func(req *http.Request, _ option.MiddlewareNext) (*http.Response, error) {
		u := *req.URL
		e = &openAIEndpoint{url: &u, host: req.Host, header: req.Header.Clone()}
		return nil, errEndpointTaken
	}
	opts := append(openAIKey(key), option.WithMiddleware(capture))
	if err := p.client.Post(ctx, "chat/completions", []byte{}, nil, opts...); !errors.Is(err, errEndpointTaken) || e == nil {
		if err == nil {
			err = errors.New("providers: the SDK sent no request")
		}
		return nil, err
	}
	actual, _ := p.endpoints.LoadOrStore(key, e)
	return actual.(*openAIEndpoint), nil
}

// sender is how a provider's requests go out: straight to its transport,
// or through the SDK's client (viaSDK).
type sender struct {
	transport http.RoundTripper // nil: always through the SDK
	viaSDK    atomic.Bool       // a redirect was answered: the SDK follows them
	endpoints sync.Map          // key → *openAIEndpoint
}

// init sends straight to c's transport when c is nothing more than a
// transport.
func (s *sender) init(c *http.Client) {
	if c != nil && c.Jar == nil && c.Timeout == 0 && c.CheckRedirect == nil {
		s.transport = c.Transport
		if s.transport == nil {
			s.transport = http.DefaultTransport
		}
	}
}

// post sends body to chat/completions and puts the answer in dst, as
// client.Post does: *[]byte gets the body read whole, **http.Response the
// response to read. post and send wait for the answer on the caller's
// stack; what comes after is received's.
func (p *openAIProvider) post(ctx context.Context, body *openAIBody, dst any, key string) error {
	if p.transport == nil || p.viaSDK.Load() {
		return p.postSDK(ctx, body, dst, key)
	}
	e, err := p.endpoint(ctx, key)
	if err != nil {
		return err
	}
	if e.url.User != nil {
		return p.postSDK(ctx, body, dst, key)
	}
	req, res, err := p.send(ctx, e, body)
	return p.received(ctx, e, req, res, err, body, dst, key)
}

// send makes the request and sends it.
//
//go:noinline
func (p *openAIProvider) send(ctx context.Context, e *openAIEndpoint, body *openAIBody) (*http.Request, *http.Response, error) {
	req := newRequest(e, body).WithContext(ctx)
	res, err := p.transport.RoundTrip(req)
	return req, res, err
}

// newRequest is the request of body, without its context: on the heap,
// not in send's frame (WithContext copies it).
//
//go:noinline
func newRequest(e *openAIEndpoint, body *openAIBody) *http.Request {
	return &http.Request{
		Method: http.MethodPost, URL: e.url, Host: e.host, Header: e.header,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Body: io.NopCloser(body.reader()), ContentLength: body.n, GetBody: body.getBody,
	}
}

// received turns what send got into post's answer.
//
//go:noinline
func (p *openAIProvider) received(ctx context.Context, e *openAIEndpoint, req *http.Request, res *http.Response, err error, body *openAIBody, dst any, key string) error {
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &url.Error{Op: "Post", URL: e.url.String(), Err: err}
	}
	if res == nil { // as http.Client answers a transport that says nothing
		return &url.Error{Op: "Post", URL: e.url.String(), Err: fmt.Errorf("http: RoundTripper implementation (%T) returned a nil *Response with a nil error", p.transport)}
	}
	if res.Body == nil {
		res.Body = http.NoBody
	}
	if res.StatusCode >= 300 && res.StatusCode < 400 && res.Header.Get("Location") != "" {
		res.Body.Close()
		p.viaSDK.Store(true)
		return p.postSDK(ctx, body, dst, key)
	}
	if res.StatusCode >= 400 {
		return openAIError(req, res)
	}
	switch dst := dst.(type) {
	case **http.Response:
		*dst = res
		return nil
	case *[]byte:
		contents, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return errors.New("error reading response body: " + err.Error())
		}
		*dst = contents
		return nil
	default:
		res.Body.Close()
		return errors.New("providers: post into an unknown destination")
	}
}

// postSDK sends body through the SDK's client.
func (p *openAIProvider) postSDK(ctx context.Context, body *openAIBody, dst any, key string) error {
	opts := append(openAIKey(key), option.WithMiddleware(body.sized))
	return p.client.Post(ctx, "chat/completions", body.reader(), dst, opts...)
}

// openAIError is the SDK's error for a failed answer: the API's "error"
// object, the status, the request and the response (its body readable
// again).
func openAIError(req *http.Request, res *http.Response) error {
	contents, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	res.Body = io.NopCloser(bytes.NewBuffer(contents))
	aerr := &openai.Error{Request: req, Response: res, StatusCode: res.StatusCode}
	if err := aerr.UnmarshalJSON([]byte(gjson.GetBytes(contents, "error").Raw)); err != nil {
		return err
	}
	return aerr
}
