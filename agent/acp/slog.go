package acp

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.uber.org/zap"
)

// protocolLogger is the connection's logger: its lines go to the run's
// zap logger, and the last error (output that is not JSON-RPC, say) is
// kept for the run's Notes.
func protocolLogger(log *zap.Logger, t *tail) *slog.Logger {
	return slog.New(&slogHandler{log: log, t: t})
}

type slogHandler struct {
	log   *zap.Logger
	t     *tail
	attrs []slog.Attr
}

func (h *slogHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	add := func(a slog.Attr) bool {
		v := a.Value.String()
		if len(v) > 200 {
			v = v[:200] + "…"
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	if r.Level >= slog.LevelError {
		h.t.setProto(b.String())
	}
	h.log.Warn("acp protocol", zap.String("detail", b.String()))
	return nil
}

func (h *slogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &slogHandler{log: h.log, t: h.t, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *slogHandler) WithGroup(string) slog.Handler { return h }
