//go:build !vtprotobuf

package envoyrls

// vtprotobufTag is whether this test binary was built with the vtprotobuf tag.
const vtprotobufTag = false
