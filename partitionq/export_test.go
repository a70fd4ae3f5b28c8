package partitionq

// ChunkSize is chunkSize, for the tests of package partitionq_test.
const ChunkSize = chunkSize
