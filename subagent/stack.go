package subagent

// runStack is the goroutine stack a sub-agent run grows to before its
// first model call: the transcript's JSON encoding, the request's
// encoding and the HTTP/2 round trip reach ~8–16 KiB.
const runStack = 16 << 10

// growRunStack grows the calling goroutine's stack to runStack in one
// step, while only the lane's few frames are on it.
//
// A goroutine starts with 2 KiB and doubles its stack when a call needs
// more, each time allocating the larger stack, copying the frames and
// walking every one of them to adjust its pointers. A run's goroutine
// doubled three times before its first call, the last time ~20 frames
// deep in encoding/json: in the 10,000 case that copying was ~7 % of the
// gateway's CPU while the children start (docs/performance.md). Grown
// here, the copy is of two or three frames. The run keeps about that
// much in use while its model call is in flight, so the stack is no
// larger than it was; the collector shrinks it again when it is not.
//
//go:noinline
func growRunStack() {
	var frame [runStack - 4<<10]byte // with the guard: a 16 KiB stack
	touchStack(&frame)
}

//go:noinline
func touchStack(b *[runStack - 4<<10]byte) { b[0] = 1 }
