package scheduler

// LoRAState is what an endpoint reports about its LoRA adapters: where
// each adapter is resident (vLLM's vllm:lora_adapter_loaded, level "gpu"
// or "cpu") and, from the older vllm:lora_requests_info, which adapters
// have requests. Lists hold at most MaxLoRAAdapters names of at most
// MaxLoRANameBytes bytes each; the scraper drops the rest.
type LoRAState struct {
	// Active adapters have running requests (running_lora_adapters).
	// An adapter with running requests occupies a GPU slot.
	Active []string
	// Waiting adapters have queued requests (waiting_lora_adapters).
	Waiting []string
	// Max is the number of GPU adapter slots (vllm:max_gpu_lora_adapters,
	// else the max_lora label, vLLM's --max-loras); 0 means unknown.
	Max int
	// Residency reports whether the server exports residency: GPU, CPU,
	// Pinned and Used are meaningful, even when empty. Without it only
	// Active, Waiting and Max are known.
	Residency bool
	// GPU adapters are loaded in GPU slots (level="gpu"); CPU adapters are
	// in the CPU cache only (level="cpu", not also on the GPU): serving
	// them costs a copy to the GPU, not a load from disk.
	GPU, CPU []string
	// Pinned adapters are resident and never evicted (pinned="true").
	Pinned []string
	// Used is the number of GPU slots in use (vllm:num_gpu_loaded_lora_adapters,
	// else the number of GPU series, names dropped by the bounds included).
	Used int
}

// Bounds on the adapter state an endpoint reports (LoRAState).
const (
	// MaxLoRAAdapters bounds each adapter list of one endpoint (vLLM's
	// --max-cpu-loras is rarely above a few dozen).
	MaxLoRAAdapters = 256
	// MaxLoRANameBytes bounds one adapter name.
	MaxLoRANameBytes = 256
)
