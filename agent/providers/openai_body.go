package providers

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/openai/openai-go/v3/option"

	"github.com/heraldhq/herald/agent"
)

// body is the Chat Completions request body of req, written straight into
// bytes. The SDK's encoder (ChatCompletionNewParams.MarshalJSON) walks
// every message and tool by reflection, and NewStreaming then copies the
// whole body once more to set "stream": 12 % of the gateway's CPU with
// 10,000 sub-agents in flight (docs/performance.md). What it writes is
// what the SDK wrote for the same request: TestOpenAIBodyMatchesSDK
// compares the two. stream adds "stream" and "stream_options" (the
// usage chunk).
//
// The body is kept in parts for as long as the call is in flight (net/http
// keeps it to send it again, the retrier for a retry): this call's own
// bytes — model, messages, options — and each tool's entry as rendered
// once for every call that sends it (openAITool). A sub-agent's tools are
// ~7 KB of its ~8 KB first request, the same for every child; one copy per
// call in flight was 85 MB of live heap with 10,000 (docs/performance.md,
// "memory per call in flight: the heap").
func (p *openAIProvider) body(req agent.Request, stream bool) *openAIBody {
	scratch := bodyScratch.Get().(*[]byte)
	b := (*scratch)[:0]
	b = append(b, `{"model":`...)
	b = appendJSONString(b, req.Model)
	b = append(b, `,"messages":[`...)
	b = appendOpenAIMessages(b, req, !p.compatible)
	b = append(b, ']')
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = modelConfig(p.cfg, req.Model).MaxTokens
	}
	if maxTokens > 0 {
		if p.compatible {
			// Older local servers know only max_tokens.
			b = append(b, `,"max_tokens":`...)
		} else {
			// OpenAI deprecated max_tokens; reasoning models reject it.
			b = append(b, `,"max_completion_tokens":`...)
		}
		b = strconv.AppendInt(b, int64(maxTokens), 10)
	}
	if effort := p.reasoningEffort(req.Model, req.Thinking); effort != "" {
		b = append(b, `,"reasoning_effort":`...)
		b = appendJSONString(b, string(effort))
	}
	if len(req.Tools) > 0 {
		b = append(b, `,"tools":[`...)
	}
	// Exactly this call's bytes are kept; the scratch buffer goes back.
	body := &openAIBody{parts: make([][]byte, 0, len(req.Tools)+2)}
	body.add(bytes.Clone(b))
	if cap(b) <= maxBodyScratch {
		*scratch = b
		bodyScratch.Put(scratch)
	}
	for i, t := range req.Tools {
		entry := openAITool(t) // ",{…}": the comma goes before every entry but the first
		if i == 0 {
			entry = entry[1:]
		}
		body.add(entry)
	}
	switch {
	case len(req.Tools) > 0 && stream:
		body.add(endToolsStream)
	case len(req.Tools) > 0:
		body.add(endTools)
	case stream:
		body.add(endStream)
	default:
		body.add(endBody)
	}
	return body
}

// The ends of a body, after the tools or the options.
var (
	endTools       = []byte(`]}`)
	endToolsStream = []byte(`],"stream":true,"stream_options":{"include_usage":true}}`)
	endStream      = []byte(`,"stream":true,"stream_options":{"include_usage":true}}`)
	endBody        = []byte(`}`)
)

// bodyScratch holds buffers a body's own bytes are written into before
// they are copied out at their size; maxBodyScratch bounds what goes back
// (a body with files can be megabytes).
var bodyScratch = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxBodyScratch = 256 << 10

// openAIBody is a request body in parts, some shared with other calls;
// they are never written to once the body is made.
type openAIBody struct {
	parts [][]byte
	n     int64
}

func (b *openAIBody) add(part []byte) {
	b.parts = append(b.parts, part)
	b.n += int64(len(part))
}

// reader reads the body from its start.
func (b *openAIBody) reader() *partsReader { return &partsReader{parts: b.parts} }

// sized is a middleware of the SDK's client: it gives net/http the body's
// length and a way to read it again, as the SDK does itself for a body
// given as []byte. Without it a body given as a reader is sent without a
// Content-Length (chunked over HTTP/1.1) and cannot be sent again when
// net/http retries a request on a new connection.
func (b *openAIBody) sized(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	req.ContentLength = b.n
	req.GetBody = b.getBody
	return next(req)
}

// getBody is the body read again from its start (http.Request.GetBody).
func (b *openAIBody) getBody() (io.ReadCloser, error) { return io.NopCloser(b.reader()), nil }

// partsReader reads parts one after another, filling each read as far as
// it goes (net/http writes one HTTP/2 DATA frame per read).
type partsReader struct {
	parts [][]byte
	i     int // the part being read
	off   int // bytes of it read
}

func (r *partsReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.i < len(r.parts) {
		c := copy(p[n:], r.parts[r.i][r.off:])
		n += c
		r.off += c
		if r.off == len(r.parts[r.i]) {
			r.i, r.off = r.i+1, 0
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// appendOpenAIMessages writes the conversation: tool calls ride on the
// assistant message, each tool result is its own role "tool" message.
// documents: PDFs go as file parts (OpenAI's own API; OpenAI-compatible
// servers rarely take them, so they get the reference line only).
func appendOpenAIMessages(b []byte, req agent.Request, documents bool) []byte {
	first := true
	next := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	if req.System != "" {
		next()
		b = append(b, `{"role":"system","content":`...)
		b = appendJSONString(b, req.System)
		b = append(b, '}')
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case agent.RoleUser:
			next()
			b = appendOpenAIUser(b, req, m, documents)
		case agent.RoleAssistant:
			next()
			b = append(b, `{"role":"assistant"`...)
			if m.Text != "" || len(m.ToolCalls) == 0 {
				b = append(b, `,"content":`...)
				b = appendJSONString(b, m.Text)
			}
			if len(m.ToolCalls) > 0 {
				b = append(b, `,"tool_calls":[`...)
				for j, tc := range m.ToolCalls {
					if j > 0 {
						b = append(b, ',')
					}
					b = append(b, `{"id":`...)
					b = appendJSONString(b, tc.ID)
					b = append(b, `,"type":"function","function":{"name":`...)
					b = appendJSONString(b, tc.Name)
					b = append(b, `,"arguments":`...)
					b = appendJSONString(b, string(jsonObject(tc.Args)))
					b = append(b, "}}"...)
				}
				b = append(b, ']')
			}
			b = append(b, '}')
		case agent.RoleTool:
			for _, r := range m.ToolResults {
				content := r.Content
				if r.IsError && !strings.Contains(strings.ToLower(content), "error") {
					content = "error: " + content
				}
				next()
				b = append(b, `{"role":"tool","content":`...)
				b = appendJSONString(b, content)
				b = append(b, `,"tool_call_id":`...)
				b = appendJSONString(b, r.CallID)
				b = append(b, '}')
			}
		}
	}
	return b
}

// appendOpenAIUser writes a user message: its text, and its images
// (image_url with a data: URL) when the model takes images, and with
// documents its PDFs as file parts (file_data as a data: URL).
func appendOpenAIUser(b []byte, req agent.Request, m *agent.Message, documents bool) []byte {
	b = append(b, `{"role":"user","content":`...)
	parts := 0
	for _, f := range m.Files {
		kind := asContent(req, f, documents, 0)
		if kind == "" {
			continue
		}
		data, err := fileBase64(req, f)
		if err != nil {
			continue
		}
		if parts == 0 {
			b = append(b, '[')
		} else {
			b = append(b, ',')
		}
		parts++
		url := "data:" + f.MIME + ";base64," + data
		if kind == "image" {
			b = append(b, `{"type":"image_url","image_url":{"url":`...)
			b = appendJSONString(b, url)
			b = append(b, "}}"...)
		} else {
			b = append(b, `{"type":"file","file":{"filename":`...)
			b = appendJSONString(b, f.Name)
			b = append(b, `,"file_data":`...)
			b = appendJSONString(b, url)
			b = append(b, "}}"...)
		}
	}
	if parts == 0 {
		b = appendJSONString(b, m.Text)
		return append(b, '}')
	}
	b = append(b, `,{"type":"text","text":`...)
	b = appendJSONString(b, m.Text)
	return append(b, "}]}"...)
}

// maxOpenAITools bounds the rendered-tool cache; past it a tool is
// rendered on every call.
const maxOpenAITools = 1024

// openAITools caches each tool rendered as its Chat Completions entry,
// keyed by name and description, holding the schema it was rendered from:
// every model call sends every tool.
var openAITools = struct {
	sync.Mutex
	m map[[2]string]renderedTool
}{m: make(map[[2]string]renderedTool)}

type renderedTool struct {
	schema json.RawMessage
	json   []byte // ",{…}"
}

// openAITool is t's entry in "tools" after a comma (",{…}"): a function
// with its schema, or an object taking no properties when the schema is
// empty or not an object. The slice is shared by every call sending t and
// must not be written to.
func openAITool(t agent.ToolSpec) []byte {
	key := [2]string{t.Name, t.Description}
	openAITools.Lock()
	r, ok := openAITools.m[key]
	openAITools.Unlock()
	if ok && bytes.Equal(r.schema, t.Schema) {
		return r.json
	}
	b := append([]byte(nil), `,{"type":"function","function":{"name":`...)
	b = appendJSONString(b, t.Name)
	if t.Description != "" {
		b = append(b, `,"description":`...)
		b = appendJSONString(b, t.Description)
	}
	b = append(b, `,"parameters":`...)
	var compact bytes.Buffer
	if len(parseSchema(t.Schema)) > 0 && json.Compact(&compact, t.Schema) == nil {
		b = append(b, compact.Bytes()...)
	} else {
		b = append(b, `{"properties":{},"type":"object"}`...)
	}
	b = append(b, "}}"...)
	openAITools.Lock()
	if len(openAITools.m) < maxOpenAITools || ok {
		openAITools.m[key] = renderedTool{schema: append(json.RawMessage(nil), t.Schema...), json: b}
	}
	openAITools.Unlock()
	return b
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but not valid JavaScript;
		// escaped as encoding/json does.
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
