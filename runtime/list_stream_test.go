package runtime

import (
	"errors"
	"testing"
)

func TestSendChunks(t *testing.T) {
	for _, n := range []int{0, 1, listStreamChunk, listStreamChunk + 1, 3*listStreamChunk - 1} {
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		var got []int
		msgs := 0
		if err := sendChunks(items, func(c []int) error {
			if len(c) == 0 || len(c) > listStreamChunk {
				t.Fatalf("n=%d: a message of %d items", n, len(c))
			}
			msgs++
			got = append(got, c...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != n || msgs != (n+listStreamChunk-1)/listStreamChunk {
			t.Fatalf("n=%d: %d items in %d messages", n, len(got), msgs)
		}
		for i, v := range got {
			if v != i {
				t.Fatalf("n=%d: item %d is %d", n, i, v)
			}
		}
	}
	boom := errors.New("boom")
	if err := sendChunks([]int{1, 2}, func([]int) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}
