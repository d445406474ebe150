package secret

// HeldTail is the length of the longest tail of b that is the start (not
// the whole) of one of forms: what a masker of a stream cut into pieces
// (WebSocket frames) holds back until the next piece, as Reader does.
func HeldTail(b []byte, forms [][]byte) int { return heldTail(b, forms) }
