package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldhq/herald/channels"
	"github.com/heraldhq/herald/store"
)

// stateSQL opens a handle on the state database for a channel whose
// library keeps its own tables there (channels.Deps.SQL): the Matrix
// crypto store, so the bot's device survives a restart and a failover to
// another replica on the same PostgreSQL database (SPEC §21).
func (g *Gateway) stateSQL() (channels.SQLDB, error) {
	opener, ok := g.db.(interface {
		SQLHandle() (store.SQLHandle, error)
	})
	if !ok {
		return channels.SQLDB{}, fmt.Errorf("the state store (%T) gives no SQL handle", g.db)
	}
	h, err := opener.SQLHandle()
	if err != nil {
		return channels.SQLDB{}, err
	}
	return channels.SQLDB{DB: h.DB, Dialect: h.Dialect, Close: h.Close}, nil
}

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
