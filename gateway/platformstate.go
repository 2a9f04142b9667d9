package gateway

import (
	"context"
	"time"

	"github.com/heraldhq/herald/channels"
)

// moduleNames lists the registered channel modules.
func moduleNames() []channels.Name {
	mods := channels.Modules()
	names := make([]channels.Name, len(mods))
	for i, m := range mods {
		names[i] = m.Name
	}
	return names
}

// channelState is a channel's namespaced key-value store: its keys live
// under "<name>." in the store's kv table (telegram.offset,
// matrix.next_batch.<user>, slack.slash:<signature>), where they always
// were. Without a store (doctor) it is a memory one.
func (g *Gateway) channelState(name channels.Name) channels.KV {
	if g.db == nil {
		return &channels.MemoryKV{}
	}
	return channelKV{db: g.db, prefix: string(name) + "."}
}

// channelKV is the gateway's kv table seen through one channel's prefix.
type channelKV struct {
	db interface {
		GetKV(ctx context.Context, key string) (string, bool, error)
		SetKV(ctx context.Context, key, value string) error
		ClaimKV(ctx context.Context, key, value string) (bool, error)
		DeleteKVBefore(ctx context.Context, prefix string, t time.Time) (int64, error)
	}
	prefix string
}

var _ channels.KV = channelKV{}

func (k channelKV) Get(ctx context.Context, key string) (string, bool, error) {
	return k.db.GetKV(ctx, k.prefix+key)
}

func (k channelKV) Set(ctx context.Context, key, value string) error {
	return k.db.SetKV(ctx, k.prefix+key, value)
}

func (k channelKV) Claim(ctx context.Context, key, value string) (bool, error) {
	return k.db.ClaimKV(ctx, k.prefix+key, value)
}

func (k channelKV) DeleteBefore(ctx context.Context, prefix string, t time.Time) (int64, error) {
	return k.db.DeleteKVBefore(ctx, k.prefix+prefix, t)
}
