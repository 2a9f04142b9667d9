// Package admin is the operator's console (SPEC §27): the /admin page, its
// JSON API under /admin/api/ and its server-sent events, behind
// gateway.admin.token. It reads the state through the store's aggregates
// and reaches the running process through one narrow interface (Live)
// that the gateway implements; the JSON objects it serves are the ones
// `herald`'s CLI prints.
//
// It must not import the gateway or the web chat (channels/web): the web
// chat and the console are peers on the HTTP listener.
package admin
