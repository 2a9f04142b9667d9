package providers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/sjson"
	"go.uber.org/zap"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/config"
)

// The Chat Completions body herald writes itself (openai_body.go) is the
// body openai-go wrote for the same request — ChatCompletionNewParams built
// as the provider built it before, marshalled by the SDK, with "stream" set
// as NewStreaming sets it — for every kind of message and tool, on OpenAI
// and on an OpenAI-compatible server.
func TestOpenAIBodyMatchesSDK(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"pattern":{"type":"string","description":"a <regexp> & more"},"n":{"type":"integer","minimum":1e2}},"required":["pattern"],"additionalProperties":false}`)
	files := map[string]string{"img": "\x89PNG fake", "doc": "%PDF-1.4 fake"}
	open := func(_ context.Context, id string) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(files[id])), nil
	}
	conversation := []agent.Message{
		{Role: agent.RoleUser, Text: "look at these \u2028 \"quoted\" \t tab \x01 ctl \xff bad utf-8 ✓", Files: []agent.File{
			{ID: "img", Name: "a.png", MIME: "image/png", Size: 11}, {ID: "doc", Name: "b.pdf", MIME: "application/pdf", Size: 13},
			{ID: "x", Name: "c.zip", MIME: "application/zip", Size: 3}}},
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{
			{ID: "call_1", Name: "grep", Args: json.RawMessage(`{"pattern":"a"}`)},
			{ID: "call_2", Name: "exec", Args: nil},
			{ID: "call_3", Name: "exec", Args: json.RawMessage(`not json`)}}},
		{Role: agent.RoleTool, ToolResults: []agent.ToolResult{
			{CallID: "call_1", Name: "grep", Content: "found"},
			{CallID: "call_2", Name: "exec", Content: "denied", IsError: true},
			{CallID: "call_3", Name: "exec", Content: "Error: bad", IsError: true}}},
		{Role: agent.RoleAssistant, Text: "done, with text and a call", ToolCalls: []agent.ToolCall{{ID: "call_4", Name: "grep", Args: json.RawMessage(`{}`)}}},
		{Role: agent.RoleTool, ToolResults: []agent.ToolResult{{CallID: "call_4", Content: ""}}},
		{Role: agent.RoleAssistant},
		{Role: agent.RoleUser, Text: ""},
	}
	tools := []agent.ToolSpec{
		{Name: "grep", Description: "search files", Schema: schema},
		{Name: "now"},
		{Name: "odd", Description: "a schema that is no object", Schema: json.RawMessage(`[1,2]`)},
		{Name: "empty", Schema: json.RawMessage(`{}`)},
		{Name: "spaced", Schema: json.RawMessage("{ \"type\" : \"object\" ,\n \"properties\": {} }")},
	}
	cases := []struct {
		name string
		cfg  config.Provider
		req  agent.Request
	}{
		{"plain", config.Provider{API: "openai"}, agent.Request{Model: "gpt-4o", Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}},
		{"everything", config.Provider{API: "openai"}, agent.Request{Model: "o3", System: "be brief <b>", Messages: conversation,
			Tools: tools, Thinking: agent.ThinkingHigh, MaxTokens: 4096, Images: true, OpenFile: open}},
		{"compatible", config.Provider{API: APIOpenAICompatible, BaseURL: "http://x"}, agent.Request{Model: "llama", System: "s", Messages: conversation,
			Tools: tools, Thinking: agent.ThinkingLow, MaxTokens: 100, Images: true, OpenFile: open}},
		{"no images", config.Provider{API: "openai"}, agent.Request{Model: "gpt-5-chat", Messages: conversation, Thinking: agent.ThinkingMedium, OpenFile: open}},
		{"configured max tokens", config.Provider{API: "openai", Models: []config.Model{{ID: "gpt-4o", MaxTokens: 777}}},
			agent.Request{Model: "gpt-4o", Messages: conversation[:1]}},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			p := &openAIProvider{cfg: c.cfg, compatible: c.cfg.API == APIOpenAICompatible, log: zap.NewNop()}
			params := p.sdkParams(c.req)
			if stream {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			want, err := params.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if stream {
				want, _ = sjson.SetBytes(want, "stream", true)
			}
			got := bodyBytes(p.body(c.req, stream))
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: our body is not JSON: %v\n%s", c.name, err, got)
			}
			_ = json.Unmarshal(want, &w)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s (stream %v):\nours %s\nSDK  %s", c.name, stream, got, want)
			}
		}
	}
}

// The SDK's ChatCompletionNewParams as the provider built them before it
// wrote its bodies itself: the reference TestOpenAIBodyMatchesSDK holds
// the body to.
func (p *openAIProvider) sdkParams(req agent.Request) openai.ChatCompletionNewParams {
	params := openai.ChatCompletionNewParams{
		Model:    shared.ChatModel(req.Model),
		Messages: sdkMessages(req, !p.compatible),
	}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = modelConfig(p.cfg, req.Model).MaxTokens
	}
	if maxTokens > 0 {
		if p.compatible {
			// Older local servers know only max_tokens.
			params.MaxTokens = openai.Int(int64(maxTokens))
		} else {
			// OpenAI deprecated max_tokens; reasoning models reject it.
			params.MaxCompletionTokens = openai.Int(int64(maxTokens))
		}
	}
	params.ReasoningEffort = p.reasoningEffort(req.Model, req.Thinking)
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{}}}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		if schema := parseSchema(t.Schema); len(schema) > 0 {
			fd.Parameters = schema
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	return params
}

// sdkMessages maps the conversation: tool calls ride on the assistant
// message, each tool result is its own role "tool" message. documents: PDFs
// go as file parts (OpenAI's own API; OpenAI-compatible servers rarely take
// them, so they get the reference line only).
func sdkMessages(req agent.Request, documents bool) []openai.ChatCompletionMessageParamUnion {
	var out []openai.ChatCompletionMessageParamUnion
	if req.System != "" {
		out = append(out, openai.SystemMessage(req.System))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case agent.RoleUser:
			out = append(out, sdkUser(req, m, documents))
		case agent.RoleAssistant:
			am := openai.ChatCompletionAssistantMessageParam{}
			if m.Text != "" || len(m.ToolCalls) == 0 {
				am.Content.OfString = openai.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				am.ToolCalls = append(am.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID: tc.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
							Name:      tc.Name,
							Arguments: string(jsonObject(tc.Args)),
						},
					},
				})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &am})
		case agent.RoleTool:
			for _, r := range m.ToolResults {
				content := r.Content
				if r.IsError && !strings.Contains(strings.ToLower(content), "error") {
					content = "error: " + content
				}
				out = append(out, openai.ToolMessage(content, r.CallID))
			}
		}
	}
	return out
}

// sdkUser is a user message: its text, and its images (image_url with
// a data: URL) when the model takes images, and with documents its PDFs as
// file parts (file_data as a data: URL).
func sdkUser(req agent.Request, m agent.Message, documents bool) openai.ChatCompletionMessageParamUnion {
	var parts []openai.ChatCompletionContentPartUnionParam
	for _, f := range m.Files {
		kind := asContent(req, f, documents, 0)
		if kind == "" {
			continue
		}
		data, err := fileBase64(req, f)
		if err != nil {
			continue
		}
		url := "data:" + f.MIME + ";base64," + data
		if kind == "image" {
			parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: url}))
		} else {
			parts = append(parts, openai.FileContentPart(openai.ChatCompletionContentPartFileFileParam{
				Filename: openai.String(f.Name), FileData: openai.String(url)}))
		}
	}
	if len(parts) == 0 {
		return openai.UserMessage(m.Text)
	}
	parts = append(parts, openai.TextContentPart(m.Text))
	return openai.UserMessage(parts)
}

// BenchmarkOpenAIBody: a sub-agent's first request (a system prompt,
// fifteen tools, its task), written by herald and by the SDK.
func BenchmarkOpenAIBody(b *testing.B) {
	var tools []agent.ToolSpec
	for i := range 15 {
		tools = append(tools, agent.ToolSpec{Name: fmt.Sprintf("tool_%d", i), Description: strings.Repeat("does a thing well. ", 12),
			Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"a path in the workspace"},` +
				`"offset":{"type":"integer","minimum":0},"limit":{"type":"integer","description":"at most this many bytes"}},"required":["path"],"additionalProperties":false}`)})
	}
	req := agent.Request{Model: "gpt-4o", System: strings.Repeat("You are a sub-agent. Do the task. ", 60),
		Messages: []agent.Message{{Role: agent.RoleUser, Text: "summarise the report in three lines"}}, Tools: tools}
	p := &openAIProvider{cfg: config.Provider{API: "openai"}, log: zap.NewNop()}
	b.Run("herald", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.body(req, true)
		}
	})
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			params := p.sdkParams(req)
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			body, _ := params.MarshalJSON()
			sjson.SetBytes(body, "stream", true)
		}
	})
}

// A body sent in parts (openAIBody) reaches the server as the one slice
// client.Post sent before: the same bytes, the same headers, with its
// Content-Length (not chunked), over HTTP/1.1 and HTTP/2; a retried
// attempt sends the whole body again.
func TestOpenAIRequestOnTheWire(t *testing.T) {
	type seen struct {
		header   http.Header
		length   int64
		chunked  bool
		body     []byte
		protocol string
	}
	tools := []agent.ToolSpec{readFileSpec, {Name: "exec", Description: "run a command", Schema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}}}`)}}
	req := agent.Request{Model: "gpt-4o", System: "You are a test.", Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}, Tools: tools}
	for _, h2 := range []bool{false, true} {
		var mu sync.Mutex
		var got []seen
		fake := llmtest.NewHandler(llmtest.APIOpenAI, func(llmtest.Call) llmtest.Reply {
			mu.Lock()
			defer mu.Unlock()
			if len(got) == 1 { // the first request of each call fails
				return llmtest.Reply{Status: 500, Message: "boom"}
			}
			return llmtest.Reply{Text: "ok"}
		}, false)
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got = append(got, seen{r.Header.Clone(), r.ContentLength, slices.Contains(r.TransferEncoding, "chunked"), body, r.Proto})
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
			fake.ServeHTTP(w, r)
		}))
		client := srv.Client()
		if h2 {
			srv.EnableHTTP2 = true
			srv.StartTLS()
			client = srv.Client()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		pr, err := New("wire", config.Provider{API: APIOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-test-key"}, Options{HTTPClient: client, Sleep: (&sleeps{}).sleep})
		if err != nil {
			t.Fatal(err)
		}
		p := pr.(*openAIProvider)
		for _, stream := range []bool{false, true} {
			mu.Lock()
			got = nil
			mu.Unlock()
			var err error
			if stream {
				_, err = p.Stream(context.Background(), req, func(string) {})
			} else {
				_, err = p.Complete(context.Background(), req)
			}
			if err != nil {
				t.Fatalf("h2 %v stream %v: %v", h2, stream, err)
			}
			// The same body given to client.Post as one slice, as before.
			want := bodyBytes(p.body(req, stream))
			var raw *http.Response
			if err := p.client.Post(context.Background(), "chat/completions", want, &raw, openAIKey("")...); err == nil {
				raw.Body.Close()
			}
			mu.Lock()
			if len(got) != 3 {
				t.Fatalf("h2 %v stream %v: the server saw %d requests, want 3 (a failure, its retry, the reference)", h2, stream, len(got))
			}
			ref := got[2]
			for i, s := range got[:2] {
				if !bytes.Equal(s.body, want) || s.length != int64(len(want)) || s.chunked || s.protocol != ref.protocol {
					t.Errorf("h2 %v stream %v attempt %d: %s length %d chunked %v (want %s, %d bytes)\n%s", h2, stream, i+1, s.protocol, s.length, s.chunked, ref.protocol, len(want), s.body)
				}
				if !reflect.DeepEqual(s.header, ref.header) {
					t.Errorf("h2 %v stream %v attempt %d: headers\n%v\nwant\n%v", h2, stream, i+1, s.header, ref.header)
				}
			}
			mu.Unlock()
			// Through the SDK's client (a redirect policy, a user in the
			// URL) the parts go out as the same body, sized.
			var answer []byte
			if err := p.postSDK(context.Background(), p.body(req, stream), &answer, ""); err != nil {
				t.Fatalf("h2 %v stream %v through the SDK: %v", h2, stream, err)
			}
			mu.Lock()
			if s := got[len(got)-1]; len(got) != 4 || !bytes.Equal(s.body, want) || s.length != int64(len(want)) || s.chunked {
				t.Errorf("h2 %v stream %v through the SDK: %d requests, the last %d bytes, length %d, chunked %v (want %d bytes)", h2, stream, len(got), len(s.body), s.length, s.chunked, len(want))
			}
			mu.Unlock()
			// What net/http reads to send a direct request's body again.
			e, err := p.endpoint(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			again, err := newRequest(e, p.body(req, stream)).GetBody()
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(again); !bytes.Equal(b, want) {
				t.Errorf("h2 %v stream %v: GetBody reads %d bytes, want the %d sent", h2, stream, len(b), len(want))
			}
		}
		if h2 && got[0].protocol != "HTTP/2.0" {
			t.Errorf("protocol %s, want HTTP/2.0", got[0].protocol)
		}
	}
}

// A request sent straight to the transport fails as it failed through
// the SDK's client: an API error is the same *openai.Error (status,
// message, code, raw JSON, Retry-After readable), a refused connection
// the same *url.Error; a provider answering a redirect is followed as
// the SDK follows it, from then on.
func TestOpenAIDirectFailsAsSDK(t *testing.T) {
	req := agent.Request{Model: "gpt-4o", Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}
	answer := llmtest.Reply{Status: 400, Message: "bad things", Code: "context_length_exceeded", RetryAfter: "7"}
	srv := llmtest.NewOpenAI(t, func(llmtest.Call) llmtest.Reply { return answer })
	pr, err := New("direct", config.Provider{API: APIOpenAI, BaseURL: srv.URL + "/v1", APIKey: "sk-test-key"}, Options{HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	p := pr.(*openAIProvider)
	if p.transport == nil {
		t.Fatal("a client with only a transport is not sent to directly")
	}
	body := p.body(req, false)
	var raw []byte
	direct := p.post(context.Background(), body, &raw, "")
	sdk := p.postSDK(context.Background(), body, &raw, "")
	var d, s *openai.Error
	if !errors.As(direct, &d) || !errors.As(sdk, &s) {
		t.Fatalf("errors %T %v / %T %v, want *openai.Error both", direct, direct, sdk, sdk)
	}
	if d.StatusCode != s.StatusCode || d.Message != s.Message || d.Code != s.Code || d.Type != s.Type || d.RawJSON() != s.RawJSON() ||
		d.Error() != s.Error() || d.Response.Header.Get("Retry-After") != "7" {
		t.Errorf("direct %+v\nsdk    %+v", d, s)
	}
	if classifyOpenAI(direct) != classifyOpenAI(sdk) {
		t.Errorf("classified %+v, through the SDK %+v", classifyOpenAI(direct), classifyOpenAI(sdk))
	}

	// Nothing listens: the transport's error, as http.Client reports it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pr, _ = New("down", config.Provider{API: APIOpenAI, BaseURL: "http://" + addr + "/v1", APIKey: "k"}, Options{HTTPClient: &http.Client{}})
	p = pr.(*openAIProvider)
	direct, sdk = p.post(context.Background(), body, &raw, ""), p.postSDK(context.Background(), body, &raw, "")
	var du, su *url.Error
	if !errors.As(direct, &du) || !errors.As(sdk, &su) || direct.Error() != sdk.Error() {
		t.Errorf("refused: %T %v\nthrough the SDK: %T %v", direct, direct, sdk, sdk)
	}
	if classifyOpenAI(direct) != classifyOpenAI(sdk) {
		t.Errorf("classified %+v, through the SDK %+v", classifyOpenAI(direct), classifyOpenAI(sdk))
	}

	// A provider behind a redirect: the call is answered, and the next
	// goes through the SDK at once.
	var redirects, calls int
	var mu sync.Mutex
	fake := llmtest.NewHandler(llmtest.APIOpenAI, llmtest.Text("moved ok"), false)
	moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/old/") {
			redirects++
			http.Redirect(w, r, "/v1/"+strings.TrimPrefix(r.URL.Path, "/old/"), http.StatusPermanentRedirect)
			return
		}
		calls++
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(moved.Close)
	pr, _ = New("moved", config.Provider{API: APIOpenAI, BaseURL: moved.URL + "/old", APIKey: "k"}, Options{HTTPClient: &http.Client{}})
	for i := range 2 {
		resp, err := pr.Complete(context.Background(), req)
		if err != nil || resp.Text != "moved ok" {
			t.Fatalf("call %d behind a redirect: %v, %v", i, resp, err)
		}
	}
	if mu.Lock(); redirects != 3 || calls != 2 {
		t.Errorf("%d redirects, %d calls answered; want 3 (the direct try, then one per call through the SDK) and 2", redirects, calls)
	}
	mu.Unlock()
}

// A base URL with a user in it is Basic auth on the wire when nothing else
// authorizes the request, as http.Client sends it (a transport alone does
// not): a compatible provider behind a proxy that asks for it.
func TestOpenAIBaseURLUserIsBasicAuth(t *testing.T) {
	var mu sync.Mutex
	var auth []string
	fake := llmtest.NewHandler(llmtest.APIOpenAI, llmtest.Text("ok"), false)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	base := strings.Replace(srv.URL, "http://", "http://alice:s3cret@", 1) + "/v1"
	pr, err := New("basic", config.Provider{API: APIOpenAICompatible, BaseURL: base}, Options{HTTPClient: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	req := agent.Request{Model: "llama", Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}
	if _, err := pr.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if _, err := pr.(*openAIProvider).Stream(context.Background(), req, func(string) {}); err != nil {
		t.Fatal(err)
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	mu.Lock()
	defer mu.Unlock()
	if len(auth) != 2 || auth[0] != want || auth[1] != want {
		t.Errorf("Authorization %q, want %q on both calls", auth, want)
	}
}

// bodyBytes is what body's reader puts on the wire, whole.
func bodyBytes(body *openAIBody) []byte {
	out, err := io.ReadAll(body.reader())
	if err != nil {
		panic(err)
	}
	return out
}
