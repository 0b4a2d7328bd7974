// The two enums MemoryAdapter.ts imports from "@alineo-labs/core", with the values the
// TypeScript client sends (the types are erased by esbuild).
export enum SandboxStatus {
  Running = "running",
  Completed = "completed",
}

export enum LedgerEvent {
  SandboxCreated = "sandbox.created",
  SandboxClosed = "sandbox.closed",
  ExecStarted = "exec.started",
  ExecComplete = "exec.complete",
  ExecFailed = "exec.failed",
  CheckpointCreated = "sandbox.checkpoint_created",
}
