// Package stackstart grows the main goroutine's stack to 512 KiB in one
// step, before the packages whose initialisation recurses deeply.
//
// Every goroutine starts with a 2 KiB stack that doubles when a call
// needs more, copying the stack and adjusting every frame on it. Package
// initialisation runs on the main goroutine, and some linked packages
// compile regular expressions with counted repetitions at init
// (goldmark/extension's linkify: [...]{1,256}; mautrix/id's server names:
// {1,255}), which regexp/syntax expands into nested groups and compiles
// recursively, hundreds of frames deep: the stack doubled up to 512 KiB,
// each time copying and re-walking a deep stack. Here it grows once, when
// about 2 KiB of it is in use. Go initialises a package once its imports
// are, in the order of their import paths: this package imports nothing,
// and its path sorts before github.com/yuin and maunium.net. Imported only
// by command herald; the collection after ready shrinks the stack again.
package stackstart

func init() { grow() }

// part is below the compiler's limit for a variable on the stack (128
// KiB); with rest, live at once, they make a frame just over 256 KiB,
// which needs a 512 KiB stack. The frame is zeroed (its pages touched)
// once; the regexps' recursion uses about as much of it.
const (
	part = 120 << 10
	rest = 24 << 10
)

//go:noinline
func grow() {
	var a, b [part]byte
	var c [rest]byte
	touch(&a, &b, &c)
}

//go:noinline
func touch(a, b *[part]byte, c *[rest]byte) { a[0], b[0], c[0] = 1, 1, 1 }
