package llmtest

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// Block is one non-text content block of a user message as the fake
// received it through the official SDKs' wire format: an Anthropic image
// or document block, or an OpenAI image_url part or file part (data: URLs).
type Block struct {
	Type string // "image" or "document"
	MIME string
	Data []byte // the decoded bytes
}

// Blocks returns the image and document blocks of the request's user
// messages, in order.
func (c Call) Blocks() []Block {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(c.Body, &req) != nil {
		return nil
	}
	var out []Block
	for _, m := range req.Messages {
		if m.Role != "user" {
			continue
		}
		var parts []struct {
			Type   string `json:"type"`
			Source struct {
				MediaType string `json:"media_type"`
				Data      string `json:"data"`
			} `json:"source"`
			ImageURL struct {
				URL string `json:"url"`
			} `json:"image_url"`
			File struct {
				FileData string `json:"file_data"`
			} `json:"file"`
		}
		if json.Unmarshal(m.Content, &parts) != nil {
			continue // a plain string
		}
		for _, p := range parts {
			switch p.Type {
			case "image", "document":
				b, _ := base64.StdEncoding.DecodeString(p.Source.Data)
				out = append(out, Block{Type: p.Type, MIME: p.Source.MediaType, Data: b})
			case "image_url", "file":
				url, typ := p.ImageURL.URL, "image"
				if p.Type == "file" {
					url, typ = p.File.FileData, "document"
				}
				rest, ok := strings.CutPrefix(url, "data:")
				if !ok {
					continue
				}
				mime, data, _ := strings.Cut(rest, ";base64,")
				b, _ := base64.StdEncoding.DecodeString(data)
				out = append(out, Block{Type: typ, MIME: mime, Data: b})
			}
		}
	}
	return out
}
