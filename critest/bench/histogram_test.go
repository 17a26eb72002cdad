package bench

import (
	"math"
	"testing"
)

const kubeletMetrics = `# HELP kubelet_pod_start_sli_duration_seconds [BETA] ...
# TYPE kubelet_pod_start_sli_duration_seconds histogram
kubelet_pod_start_sli_duration_seconds_bucket{le="0.5"} 0
kubelet_pod_start_sli_duration_seconds_bucket{le="1"} 50
kubelet_pod_start_sli_duration_seconds_bucket{le="2"} 100
kubelet_pod_start_sli_duration_seconds_bucket{le="+Inf"} 100
kubelet_pod_start_sli_duration_seconds_sum 130
kubelet_pod_start_sli_duration_seconds_count 100
kubelet_runtime_operations_duration_seconds_bucket{operation_type="list_containers",le="0.005"} 8
kubelet_runtime_operations_duration_seconds_bucket{operation_type="list_containers",le="0.01"} 10
kubelet_runtime_operations_duration_seconds_bucket{operation_type="list_containers",le="+Inf"} 10
kubelet_runtime_operations_duration_seconds_count{operation_type="list_containers"} 10
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="0.005"} 0
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="+Inf"} 2
kubelet_runtime_operations_duration_seconds_count{operation_type="version"} 2
`

func TestParseHistogramsAndQuantile(t *testing.T) {
	hs, err := parseHistograms(kubeletMetrics, "kubelet_pod_start_sli_duration_seconds", "kubelet_runtime_operations_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	sli := hs["kubelet_pod_start_sli_duration_seconds"]
	for _, c := range []struct{ q, want float64 }{{0.5, 1}, {0.25, 0.75}, {0.99, 1.98}} {
		if got := sli.quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("sli q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	if got := sli.cell(0.99); got != "1.980 s (n=100)" {
		t.Errorf("cell = %q", got)
	}
	lc := hs["kubelet_runtime_operations_duration_seconds{operation_type=list_containers}"]
	if got := lc.quantile(0.9); math.Abs(got-0.0075) > 1e-9 {
		t.Errorf("list_containers p90 = %v, want 0.0075", got)
	}
	if got := lc.cell(0.99); got != "9.8 ms (only 10 samples: ~max)" {
		t.Errorf("cell = %q", got)
	}
	// All in +Inf: the largest finite bound.
	if got := hs["kubelet_runtime_operations_duration_seconds{operation_type=version}"].quantile(0.5); got != 0.005 {
		t.Errorf("version p50 = %v, want 0.005", got)
	}
	if got := (histogram{}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty histogram quantile = %v", got)
	}
}

// shimd's own histogram is keyed by its rpc label.
func TestParseHistogramsByRPC(t *testing.T) {
	hs, err := parseHistograms(`shimd_rpc_duration_seconds_bucket{rpc="ImageStatus",le="0.001"} 90
shimd_rpc_duration_seconds_bucket{rpc="ImageStatus",le="0.005"} 100
shimd_rpc_duration_seconds_bucket{rpc="ImageStatus",le="+Inf"} 100
shimd_rpc_duration_seconds_count{rpc="ImageStatus"} 100
shimd_rpc_duration_seconds_bucket{rpc="Version",le="0.001"} 3
shimd_rpc_duration_seconds_bucket{rpc="Version",le="+Inf"} 3
shimd_rpc_duration_seconds_count{rpc="Version"} 3
`, "shimd_rpc_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	is := hs["shimd_rpc_duration_seconds{rpc=ImageStatus}"]
	if is.count != 100 {
		t.Fatalf("ImageStatus: %+v (keys %v)", is, hs)
	}
	if got := is.quantile(0.95); math.Abs(got-0.003) > 1e-9 {
		t.Errorf("ImageStatus p95 = %v, want 0.003", got)
	}
	if got := hs["shimd_rpc_duration_seconds{rpc=Version}"].count; got != 3 {
		t.Errorf("Version count = %v", got)
	}
}

// client-go's histograms are keyed by verb, their hosts summed, with their sums.
func TestParseHistogramsByVerbWithSum(t *testing.T) {
	hs, err := parseHistograms(`rest_client_rate_limiter_duration_seconds_bucket{host="a",verb="GET",le="0.005"} 3
rest_client_rate_limiter_duration_seconds_bucket{host="a",verb="GET",le="+Inf"} 4
rest_client_rate_limiter_duration_seconds_sum{host="a",verb="GET"} 1.5
rest_client_rate_limiter_duration_seconds_count{host="a",verb="GET"} 4
rest_client_rate_limiter_duration_seconds_bucket{host="b",verb="GET",le="0.005"} 1
rest_client_rate_limiter_duration_seconds_bucket{host="b",verb="GET",le="+Inf"} 1
rest_client_rate_limiter_duration_seconds_sum{host="b",verb="GET"} 0.001
rest_client_rate_limiter_duration_seconds_count{host="b",verb="GET"} 1
rest_client_rate_limiter_duration_seconds_bucket{host="a",verb="PATCH",le="0.005"} 0
rest_client_rate_limiter_duration_seconds_bucket{host="a",verb="PATCH",le="+Inf"} 2
rest_client_rate_limiter_duration_seconds_sum{host="a",verb="PATCH"} 3
rest_client_rate_limiter_duration_seconds_count{host="a",verb="PATCH"} 2
`, "rest_client_rate_limiter_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	get, patch := hs["rest_client_rate_limiter_duration_seconds{verb=GET}"], hs["rest_client_rate_limiter_duration_seconds{verb=PATCH}"]
	if get.count != 5 || math.Abs(get.sum-1.501) > 1e-9 || get.counts[0] != 4 {
		t.Errorf("GET = %+v, want count 5, sum 1.501, 4 in the first bucket", get)
	}
	if patch.count != 2 || patch.sum != 3 {
		t.Errorf("PATCH = %+v, want count 2, sum 3", patch)
	}
	if len(hs) != 2 {
		t.Errorf("%d series, want 2: %v", len(hs), hs)
	}
}
