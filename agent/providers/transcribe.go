package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/heraldhq/herald/config"
)

// Transcribe turns audio into text through the provider's OpenAI-
// compatible /audio/transcriptions endpoint (attachments.transcription,
// SPEC §18): OpenAI, Groq or a local whisper server. The audio is
// streamed from r as a multipart upload named name.
//
// It also returns the audio's length in seconds when the server says it
// (a verbose "duration", or OpenAI's "usage": {"type": "duration",
// "seconds"}); 0 when it does not.
func Transcribe(ctx context.Context, client *http.Client, p config.Provider, model, name, mime string, r io.Reader) (string, float64, error) {
	base := p.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	if client == nil {
		client = http.DefaultClient
	}
	c := openai.NewClient(option.WithHTTPClient(client), option.WithBaseURL(base), option.WithAPIKey(firstKey(p.Keys())), option.WithMaxRetries(1))
	res, err := c.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{
		File:  openai.File(r, name, mime),
		Model: openai.AudioModel(model),
	})
	if err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return "", 0, fmt.Errorf("transcription: HTTP %d: %s", apiErr.StatusCode, strings.TrimSpace(apiErr.Message))
		}
		return "", 0, fmt.Errorf("transcription: %w", err)
	}
	var length struct {
		Duration float64 `json:"duration"`
		Usage    struct {
			Type    string  `json:"type"`
			Seconds float64 `json:"seconds"`
		} `json:"usage"`
	}
	_ = json.Unmarshal([]byte(res.RawJSON()), &length)
	secs := length.Duration
	if length.Usage.Type == "duration" && length.Usage.Seconds > 0 {
		secs = length.Usage.Seconds
	}
	return strings.TrimSpace(res.Text), secs, nil
}
