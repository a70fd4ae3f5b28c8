package partitionq

// ChunkSize is chunkSize, for the tests of package partitionq_test.
const ChunkSize = chunkSize

// HotKeysExactMax and KeyEventsLimit are the bounds of HotKeys and Key, for
// the tests of package partitionq_test.
const (
	HotKeysExactMax = hotKeysExactMax
	KeyEventsLimit  = keyEventsLimit
)
