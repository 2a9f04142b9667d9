package gateway_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/heraldhq/herald/agent"
	"github.com/heraldhq/herald/agent/llmtest"
	"github.com/heraldhq/herald/agent/tools"
)

const filesE2EConfig = `{
  gateway: { shutdownGraceSeconds: 5 },
  models: { providers: { anthropic: { api: "anthropic", baseUrl: "{{llm}}", apiKey: "k", models: [{ id: "claude-sonnet-4-5" }] } } },
  agents: { defaults: { model: "anthropic/claude-sonnet-4-5" }, list: [{ id: "main" }] },
  attachments: { maxBytes: 200000 },
  channels: { web: { enabled: true } },
}`

func testPNG(t *testing.T) []byte { return testPNGSized(t, 4, 3) }

func testPNGSized(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	img.Set(1, 1, color.RGBA{R: 200, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// postFiles posts text and files to the web chat as multipart/form-data.
func postFiles(t *testing.T, base, client, text string, files map[string][]byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("client", client)
	_ = mw.WriteField("text", text)
	for name, data := range files {
		w, _ := mw.CreateFormFile("file", name)
		_, _ = w.Write(data)
	}
	mw.Close()
	resp, err := http.Post(base+"/api/messages", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST multipart: %s %s", resp.Status, b)
	}
}

type webFileEntry struct {
	Role  string `json:"role"`
	Text  string `json:"text"`
	Files []struct {
		ID, Name, MIME, URL string
		Size                int64
	} `json:"files"`
}

func webFileMessages(t *testing.T, base, client string) []webFileEntry {
	t.Helper()
	resp, err := http.Get(base + "/api/messages?client=" + client)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Messages []webFileEntry }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Messages
}

// TestE2EWebImageReachesModel: a PNG posted with a question through the web
// chat's multipart API reaches the model as an Anthropic image block with
// the same bytes, is named in the text as attachments/<name>, is copied
// into the conversation workspace, and is served back to its conversation
// only. A corrupt image and one over attachments.maxBytes are answered with
// the 📎 line while the message is still answered.
func TestE2EWebImageReachesModel(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, filesE2EConfig, llmtest.Text("a red dot"))
	pic := testPNG(t)
	const client = "files-a"
	postFiles(t, tg.URL, client, "what is in this picture?", map[string][]byte{
		"chart.png":  pic,
		"broken.png": append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0}, 40)...),
		"huge.bin":   bytes.Repeat([]byte("x"), 300_000),
	})
	waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return s == "a red dot" })
	notes := waitWeb(t, tg, client, 0, "system", func(s string) bool { return strings.Contains(s, "📎") })
	for _, want := range []string{"📎 broken.png was not read: it is not a readable image", "📎 huge.bin was not read: it is over the 200 KB limit (attachments.maxBytes)."} {
		if !strings.Contains(notes.Text, want) {
			t.Errorf("notes %q lack %q", notes.Text, want)
		}
	}
	calls := tg.LLM.Requests()
	if len(calls) == 0 {
		t.Fatal("no model call")
	}
	c := calls[0]
	blocks := c.Blocks()
	if len(blocks) != 1 || blocks[0].Type != "image" || blocks[0].MIME != "image/png" || !bytes.Equal(blocks[0].Data, pic) {
		t.Fatalf("model got blocks %+v, want one image/png block with the posted bytes", blocks)
	}
	if u := c.LastUser(); !strings.Contains(u, "what is in this picture?") || !strings.Contains(u, "[file: attachments/chart.png · image/png · ") {
		t.Errorf("user text %q lacks the question or the file's reference line", u)
	}
	conv := tools.ConversationID("agent:main:web:dm:" + client)
	var copies []string
	_ = filepath.WalkDir(tg.StateDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, filepath.Join(conv, "attachments", "chart.png")) {
			copies = append(copies, p)
		}
		return nil
	})
	if len(copies) != 1 {
		t.Fatalf("workspace copies of chart.png: %q, want one in the conversation workspace", copies)
	}
	if got, err := os.ReadFile(copies[0]); err != nil || !bytes.Equal(got, pic) {
		t.Errorf("workspace copy: %v (same bytes %v)", err, bytes.Equal(got, pic))
	}
	var url string
	for _, m := range webFileMessages(t, tg.URL, client) {
		if m.Role == "user" {
			for _, f := range m.Files {
				if f.Name == "chart.png" {
					url = f.URL
					sum := sha256.Sum256(pic)
					if f.MIME != "image/png" || f.Size != int64(len(pic)) || f.ID != base64Hex(sum[:]) {
						t.Errorf("file object %+v", f)
					}
				}
			}
		}
	}
	if url == "" {
		t.Fatal("the user's message object carries no chart.png")
	}
	resp, err := http.Get(tg.URL + "/" + url)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, pic) || resp.Header.Get("Content-Type") != "image/png" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET %s: %s %s, %d bytes", url, resp.Status, resp.Header, len(got))
	}
	// Another conversation cannot fetch it.
	other := strings.Replace(url, "client="+client, "client=files-b", 1)
	resp, err = http.Get(tg.URL + "/" + other)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET the file as another client: %s, want 404", resp.Status)
	}
}

// TestE2EWebJSONFilesAndHTML: the JSON form with base64 files; an HTML file
// is stored as text/plain and served as a download, never rendered.
func TestE2EWebJSONFilesAndHTML(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, filesE2EConfig, llmtest.Text("ok"))
	const client = "files-json"
	html := []byte("<html><script>alert(1)</script></html>")
	body, _ := json.Marshal(map[string]any{"client": client, "text": "", "files": []map[string]string{
		{"name": "page.html", "mime": "text/html", "data": base64.StdEncoding.EncodeToString(html)},
	}})
	resp, err := http.Post(tg.URL+"/api/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST JSON files: %s", resp.Status)
	}
	waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return s == "ok" })
	if u := tg.LLM.Requests()[0].LastUser(); !strings.Contains(u, "[file: attachments/page.html · text/plain · 38 B]") {
		t.Errorf("user text %q, want page.html named as text/plain", u)
	}
	var url string
	for _, m := range webFileMessages(t, tg.URL, client) {
		for _, f := range m.Files {
			url = f.URL
		}
	}
	resp, err = http.Get(tg.URL + "/" + url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "application/octet-stream" || !strings.HasPrefix(cd, "attachment") {
		t.Errorf("HTML file served as %q / %q, want a download", ct, cd)
	}
}

func base64Hex(b []byte) string {
	const hexd = "0123456789abcdef"
	out := make([]byte, len(b)*2)
	for i, c := range b {
		out[2*i], out[2*i+1] = hexd[c>>4], hexd[c&15]
	}
	return string(out)
}

// TestE2EWebSendFile: the model attaches a workspace file with send_file;
// the reply's text and then the file, with its caption, reach the web
// conversation, and the file is served to that conversation.
func TestE2EWebSendFile(t *testing.T) {
	t.Parallel()
	tg := newTestGateway(t, filesE2EConfig, llmtest.Script(
		llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "send_file", Args: json.RawMessage(`{"path": "attachments/chart.png", "caption": "your chart"}`)}}},
		llmtest.Reply{Text: "Here is the chart back."},
	))
	pic := testPNG(t)
	const client = "files-out"
	postFiles(t, tg.URL, client, "send it back", map[string][]byte{"chart.png": pic})
	waitWeb(t, tg, client, 0, "assistant", func(s string) bool { return s == "your chart" })
	msgs := webFileMessages(t, tg.URL, client)
	var order []string
	var url string
	for _, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		order = append(order, m.Text)
		for _, f := range m.Files {
			if f.Name == "chart.png" && f.MIME == "image/png" {
				url = f.URL
			}
		}
	}
	if len(order) != 2 || order[0] != "Here is the chart back." || order[1] != "your chart" {
		t.Fatalf("assistant messages %q, want the text then the file's caption", order)
	}
	if url == "" {
		t.Fatalf("the file message carries no chart.png: %+v", msgs)
	}
	resp, err := http.Get(tg.URL + "/" + url)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, pic) {
		t.Errorf("GET the sent file: %s, %d bytes", resp.Status, len(got))
	}
	if res := tg.LLM.Requests()[1].Messages; !strings.Contains(res[len(res)-1].ToolResults[0].Content, `"status":"attached"`) {
		t.Errorf("send_file result %q", res[len(res)-1].ToolResults[0].Content)
	}
}

// TestE2ESpawnHandsFilesToChild: sessions_spawn's attachments give the
// child the picture (an image block with its bytes, the path in its task);
// the child's send_file goes out with its announce, after the announce's
// text, in the same conversation.
func TestE2ESpawnHandsFilesToChild(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	childCalls := 0
	tg := newTestGateway(t, filesE2EConfig, func(c llmtest.Call) llmtest.Reply {
		u := c.LastUser()
		switch {
		case strings.HasPrefix(u, "describe the chart"):
			mu.Lock()
			childCalls++
			n := childCalls
			mu.Unlock()
			if n == 1 {
				return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "send_file", Args: json.RawMessage(`{"path": "attachments/chart.png", "caption": "annotated"}`)}}}
			}
			return llmtest.Reply{Text: "a red dot on white"}
		case strings.Contains(u, "Announce step"):
			return llmtest.Reply{Text: "Result:\na red dot on white\n\nNotes:\n(none)"}
		case strings.Contains(u, "look at this") && len(c.Messages) == 1:
			return llmtest.Reply{ToolCalls: []agent.ToolCall{{Name: "sessions_spawn", Args: json.RawMessage(`{"task": "describe the chart", "attachments": ["attachments/chart.png"]}`)}}}
		}
		return llmtest.Reply{Text: "a sub-agent is on it"}
	})
	pic := testPNG(t)
	const client = "files-spawn"
	postFiles(t, tg.URL, client, "look at this", map[string][]byte{"chart.png": pic})
	waitWeb(t, tg, client, 0, "announce", func(s string) bool { return s == "annotated" })
	var child *llmtest.Call
	for _, c := range tg.LLM.Requests() {
		if strings.HasPrefix(c.LastUser(), "describe the chart") {
			child = &c
			break
		}
	}
	if child == nil {
		t.Fatal("the child made no model call")
	}
	if u := child.LastUser(); !strings.Contains(u, "\n[file: attachments/chart.png · image/png · ") {
		t.Errorf("child task %q does not name the file", u)
	}
	if b := child.Blocks(); len(b) != 1 || !bytes.Equal(b[0].Data, pic) {
		t.Errorf("child's model got %d blocks, want the picture", len(b))
	}
	var announces []string
	for _, m := range webFileMessages(t, tg.URL, client) {
		if m.Role == "announce" {
			s := m.Text
			if len(m.Files) > 0 {
				s = "file:" + m.Files[0].Name + ":" + m.Text
			}
			announces = append(announces, s)
		}
	}
	if len(announces) != 2 || !strings.HasPrefix(announces[0], "Status: success") || announces[1] != "file:chart.png:annotated" {
		t.Errorf("announce messages %q, want the announce then the child's file", announces)
	}
}
