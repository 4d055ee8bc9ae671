package rlqs_test

import (
	"testing"

	"github.com/ratelimit-sidecar/ratelimit-sidecar/internal/testutil/ledgertest"
	"github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/rlqs"
)

func TestMemoryTable(t *testing.T) {
	t.Parallel()
	ledgertest.Table(t, func(*testing.T) rlqs.Ledger { return rlqs.NewMemory(rlqs.Policy{}) })
}

func TestMemoryConcurrent(t *testing.T) {
	t.Parallel()
	ledgertest.Concurrent(t, 16, 50, rlqs.NewMemory(rlqs.Policy{}))
}
