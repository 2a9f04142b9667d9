package config

import "strings"

// Attachments defaults (SPEC §18).
const (
	DefaultAttachmentsMaxBytes      = 20_000_000
	DefaultAttachmentsMaxFiles      = 10
	DefaultAttachmentsRetentionDays = 30
	DefaultAttachmentsMaxStoredMB   = 1000
	DefaultAttachmentsMaxTotalMB    = 20000
	DefaultAttachmentsMinFreeMB     = 1024
)

// Attachments configures files, images and voice on messages (SPEC §18).
type Attachments struct {
	// MaxBytes is the largest file taken from a message (default 20 MB);
	// a larger one is not read and the person is told.
	MaxBytes int64 `json:"maxBytes"`
	// MaxFiles is how many files of one message are read (default 10).
	MaxFiles int `json:"maxFiles"`
	// RetentionDays keeps a stored file this long after the last message
	// or reply that names it (default 30).
	RetentionDays int `json:"retentionDays"`
	// MaxStoredMB bounds the stored files one conversation names (default
	// 1000 MB); MaxTotalMB those of all conversations (default 20000 MB).
	// A file past either is not read and the person is told.
	MaxStoredMB int64 `json:"maxStoredMB"`
	MaxTotalMB  int64 `json:"maxTotalMB"`
	// MinFreeMB is the free space uploads leave on the state dir's disk
	// (default 1024 MB): below it files are not read and the person is told.
	MinFreeMB int64 `json:"minFreeMB"`
	// Transcription turns voice and audio messages into text; unset, the
	// person is told voice needs it.
	Transcription Transcription `json:"transcription"`
}

// Transcription names an OpenAI-compatible /audio/transcriptions endpoint:
// a provider of models.providers (its baseUrl and key) and a model.
type Transcription struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// Enabled reports whether voice is transcribed.
func (t Transcription) Enabled() bool { return t.Provider != "" }

func (a *Attachments) applyDefaults() {
	if a.MaxBytes == 0 {
		a.MaxBytes = DefaultAttachmentsMaxBytes
	}
	if a.MaxFiles == 0 {
		a.MaxFiles = DefaultAttachmentsMaxFiles
	}
	if a.RetentionDays == 0 {
		a.RetentionDays = DefaultAttachmentsRetentionDays
	}
	if a.MaxStoredMB == 0 {
		a.MaxStoredMB = DefaultAttachmentsMaxStoredMB
	}
	if a.MaxTotalMB == 0 {
		a.MaxTotalMB = DefaultAttachmentsMaxTotalMB
	}
	if a.MinFreeMB == 0 {
		a.MinFreeMB = DefaultAttachmentsMinFreeMB
	}
	if a.Transcription.Provider != "" && a.Transcription.Model == "" {
		a.Transcription.Model = "whisper-1"
	}
}

// modelInputs are the values of models[].input.
var modelInputs = []string{"text", "image"}

func (v *validator) attachments() {
	a := v.c.Attachments
	if a.MaxBytes < 0 {
		v.add("attachments.maxBytes", "must not be negative (got %d)", a.MaxBytes)
	}
	v.nonNegative("attachments.maxFiles", a.MaxFiles)
	v.nonNegative("attachments.retentionDays", a.RetentionDays)
	for _, k := range []struct {
		key string
		n   int64
	}{{"attachments.maxStoredMB", a.MaxStoredMB}, {"attachments.maxTotalMB", a.MaxTotalMB}, {"attachments.minFreeMB", a.MinFreeMB}} {
		if k.n < 0 {
			v.add(k.key, "must not be negative (got %d)", k.n)
		}
	}
	if a.MaxStoredMB > 0 && a.MaxTotalMB > 0 && a.MaxStoredMB > a.MaxTotalMB {
		v.add("attachments.maxStoredMB", "is %d MB, more than attachments.maxTotalMB (%d MB)", a.MaxStoredMB, a.MaxTotalMB)
	}
	t := a.Transcription
	if t.Provider == "" {
		if t.Model != "" {
			v.add("attachments.transcription.provider", "missing: transcription.model is set but no provider (a models.providers id)")
		}
	} else if p, ok := v.c.Models.Providers[t.Provider]; !ok {
		v.add("attachments.transcription.provider", "unknown provider %q (not in models.providers)", t.Provider)
	} else if p.API != "openai" && p.API != "openai-compatible" {
		v.add("attachments.transcription.provider", "provider %q has api %q; transcription needs an openai or openai-compatible provider", t.Provider, p.API)
	}
	for _, id := range sortedKeys(v.c.Models.Providers) {
		for i, m := range v.c.Models.Providers[id].Models {
			for j, in := range m.Input {
				if !contains(modelInputs, in) {
					v.add(joinIndex(joinIndex(joinKey("models.providers", id)+".models", i)+".input", j), "unknown input %q (want %s)", in, oneOf(modelInputs))
				}
			}
		}
	}
}

// TakesImages reports whether model id of provider p takes images: its
// configured input, else the known vision families.
func (m Model) TakesImages(api string) bool {
	if m.Input != nil {
		return contains(m.Input, "image")
	}
	return KnownVision(api, m.ID)
}

// KnownVision reports whether a model family is known to take images.
func KnownVision(api, id string) bool {
	id = strings.ToLower(id)
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	for _, p := range []string{"claude-3", "claude-sonnet-4", "claude-opus-4", "claude-haiku-4", "claude-4", "gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-5", "o1", "o3", "o4", "gemini", "llava", "qwen2.5-vl", "qwen-vl", "pixtral", "llama-4", "llama3.2-vision"} {
		if strings.HasPrefix(id, p) {
			return true
		}
	}
	return false
}
