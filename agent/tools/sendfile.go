package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/heraldhq/herald/agent"
)

// SendFileName is the send_file tool (SPEC §18, group files).
const SendFileName = "send_file"

// FileSink takes the files send_file attaches: it stores the bytes (read
// from r, at most its own limit) and attaches the file to the reply of the
// turn or run cc belongs to (a sub-agent's go with its announce). It
// returns the stored file's size and sniffed type.
type FileSink interface {
	AttachFile(ctx context.Context, cc agent.CallContext, name, caption string, r io.Reader) (size int64, mime string, err error)
}

var sendFileFields = []field{
	{"path", "string", true, "workspace file to send, relative to the workspace (e.g. report.pdf or attachments/chart.png)"},
	{"caption", "string", false, "optional line shown with the file"},
}

type sendFile struct{ sink FileSink }

// NewSendFile returns the send_file tool over sink.
func NewSendFile(sink FileSink) agent.Tool { return &sendFile{sink: sink} }

func (t *sendFile) Group() string { return agent.GroupFiles }

func (t *sendFile) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: SendFileName,
		Description: "Attach a file from your workspace to your reply: it is posted in this chat (in the thread) after your text. " +
			"Use it for files you made (reports, charts, CSVs) or received (attachments/…). Paths outside the workspace are refused.",
		Schema: schema(sendFileFields...),
	}
}

func (t *sendFile) Call(ctx context.Context, cc agent.CallContext, raw json.RawMessage) (string, error) {
	a, err := decodeArgs(SendFileName, raw, sendFileFields...)
	if err != nil {
		return "", err
	}
	p, err := a.str("path")
	if err != nil {
		return "", err
	}
	caption, err := a.str("caption")
	if err != nil {
		return "", err
	}
	rel, lay, err := resolve(SendFileName, cc, p)
	if err != nil {
		return "", err
	}
	root, fi, _, err := statLayered(SendFileName, cc, rel, lay, p)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s: %q is not a regular file; only files can be sent", SendFileName, p)
	}
	f, _, err := OpenRegular(root, rel, os.O_RDONLY, 0)
	if err != nil {
		return "", fmt.Errorf("%s: open %q: %w", SendFileName, p, err)
	}
	defer f.Close()
	size, mime, err := t.sink.AttachFile(ctx, cc, fi.Name(), caption, f)
	if err != nil {
		return "", fmt.Errorf("%s: %q: %w", SendFileName, p, err)
	}
	out := map[string]any{"status": "attached", "path": p, "mime": mime, "size": size,
		"note": "the file is posted after your reply's text"}
	if caption != "" {
		out["caption"] = caption
	}
	b, _ := json.Marshal(out)
	return string(b), nil
}
