// PinLater wire contract (framed transport, binary protocol, service `PinLater`).
//
// Written from the original PinLater IDL's field ids, types, requiredness and defaults so that
// any client generated from the original works unchanged. PinLater-py extensions are only new
// optional fields with new ids (marked "extension"); nothing is renumbered or retyped.

namespace py thrift_libs
namespace java com.pinterest.pinlater.thrift
namespace cpp pinterest.pinlater

const string CONTINUATION_START = "0"
const string CONTINUATION_END = "-1"

enum ErrorCode {
  CONTINUATION_INVALID = 400,
  PASSWORD_INVALID = 403,
  QUEUE_NAME_INVALID = 410,
  QUEUE_NAME_TOO_LONG = 411,
  QUEUE_NOT_FOUND = 413,
  PRIORITY_NOT_SUPPORTED = 416,
  DEQUEUE_RATE_LIMITED = 429,
  ENQUEUE_REJECTED = 430,
  UNKNOWN = 500,
  NO_HEALTHY_SHARDS = 501,
  SHARD_CONNECTION_FAILED = 502,
}

enum PinLaterJobState {
  PENDING = 0,
  IN_PROGRESS = 1,
  SUCCEEDED = 2,
  FAILED = 3,
}

exception PinLaterException {
  1: required ErrorCode errorCode,
  2: required string message,
}

struct RequestContext {
  1: required string source,
  2: optional string requestId = "",
}

struct PinLaterJob {
  1: required binary body,
  2: optional byte priority = 1,
  3: optional i64 runAfterTimestampMillis,
  4: optional i32 numAttemptsAllowed = 2,
  5: optional string customStatus = "",
  // extension: printable ASCII, at most limits.max_unique_key_length characters. Within the
  // queue, an enqueue whose key is held (enqueued in the last unique_window_seconds) stores
  // nothing and answers the holding job's descriptor (docs/semantics.md, rows U-...).
  100: optional string uniqueKey,
}

struct PinLaterEnqueueRequest {
  1: required string queueName,
  2: required list<PinLaterJob> jobs,
}

struct PinLaterEnqueueResponse {
  1: required list<string> jobDescriptors,
}

struct PinLaterJobAckInfo {
  1: required string jobDescriptor,
  2: optional string appendCustomStatus = "",
  3: optional i64 retryDelayMillis = 0,
  // extension: the claim returned by dequeue; when set the ack applies only to that claim.
  100: optional string claimDescriptor,
}

struct PinLaterJobAckRequest {
  1: required string queueName,
  2: optional list<PinLaterJobAckInfo> jobsSucceeded,
  3: optional list<PinLaterJobAckInfo> jobsFailed,
}

struct PinLaterDequeueRequest {
  1: required string queueName,
  2: required i32 limit,
  3: optional PinLaterJobAckRequest jobAckRequest,
  4: optional bool dryRun = 0,
  5: optional double coverage = 1.0,
  // extension: long-poll. When no job is eligible, the server holds the request up to this
  // many ms (capped by server.max_dequeue_wait_ms) until one is; 0 or unset answers at once.
  100: optional i32 waitMillis,
}

struct PinLaterDequeueMetadata {
  1: optional i32 attemptsAllowed,
  2: optional i32 attemptsRemaining,
  // extension: the claim this dequeue made on the job (unset for dry runs).
  100: optional string claimDescriptor,
}

struct PinLaterDequeueResponse {
  1: optional map<string, binary> jobs,
  2: optional map<string, PinLaterDequeueMetadata> jobMetadata,
}

struct PinLaterCheckpointJobRequest {
  1: required string jobDescriptor,
  2: optional string newBody,
  3: optional bool moveToPending = 0,
  4: optional i64 runAfterTimestampMillis,
  5: optional i32 numOfAttemptsAllowed,
  6: optional string prependCustomStatus,
  // extension: the claim returned by dequeue; when set the checkpoint applies only to that claim.
  100: optional string claimDescriptor,
}

struct PinLaterCheckpointJobsRequest {
  1: required string queueName,
  2: required list<PinLaterCheckpointJobRequest> requests,
}

struct PinLaterLookupJobRequest {
  1: required list<string> jobDescriptors,
  2: optional bool includeBody = 0,
}

struct PinLaterJobInfo {
  1: required string jobDescriptor,
  2: required PinLaterJobState jobState,
  10: required i32 attemptsAllowed,
  3: required i32 attemptsRemaining,
  4: required string customStatus,
  5: required i64 createdAtTimestampMillis,
  6: optional i64 runAfterTimestampMillis,
  7: optional i64 updatedAtTimestampMillis,
  8: optional string claimDescriptor,
  9: optional binary body,
}

struct PinLaterGetJobCountRequest {
  1: required string queueName,
  2: required PinLaterJobState jobState,
  3: optional byte priority,
  4: optional bool countFutureJobs = 0,
  5: optional string bodyRegexToMatch,
}

struct PinLaterScanJobsRequest {
  1: required string queueName,
  2: required PinLaterJobState jobState,
  3: optional byte priority,
  4: optional bool scanFutureJobs = 0,
  5: optional string continuation = CONTINUATION_START,
  6: optional i32 limit = 100,
  7: optional string bodyRegexToMatch,
}

struct PinLaterScanJobsResponse {
  1: required list<PinLaterJobInfo> scannedJobs,
  2: optional string continuation = CONTINUATION_END,
}

struct PinLaterRetryFailedJobsRequest {
  1: required string queueName,
  2: optional byte priority = 1,
  3: optional i32 attemptsToAllow = 1,
  4: optional i64 runAfterTimestampMillis,
  5: optional i32 limit = 1000,
}

struct PinLaterDeleteJobsRequest {
  1: required string queueName,
  2: required PinLaterJobState jobState,
  3: optional byte priority = 1,
  4: optional string bodyRegexToMatch,
  5: optional i32 limit = 1000,
}

// extension: periodic jobs (docs/semantics.md P-next-runs). A new method, read-only: a client
// generated from the original IDL never calls it.
struct PinLaterGetSchedulesRequest {
  1: optional string queueName,
  2: optional i32 count = 5,
}

struct PinLaterScheduleInfo {
  1: required string queueName,
  2: required string name,
  3: required string cron,
  4: required string timezone,
  5: required string missedPolicy,
  6: required i32 catchUpSeconds,
  7: required byte priority,
  8: required i32 numAttemptsAllowed,
  9: required list<i64> nextRunTimestampsMillis,
}

service PinLater {
  void createQueue(1: RequestContext context, 2: string name)
      throws (1: PinLaterException e),
  void deleteQueue(1: RequestContext context, 2: string name, 3: string password)
      throws (1: PinLaterException e),
  PinLaterEnqueueResponse enqueueJobs(1: RequestContext context, 2: PinLaterEnqueueRequest request)
      throws (1: PinLaterException e),
  PinLaterDequeueResponse dequeueJobs(1: RequestContext context, 2: PinLaterDequeueRequest request)
      throws (1: PinLaterException e),
  void ackDequeuedJobs(1: RequestContext context, 2: PinLaterJobAckRequest request)
      throws (1: PinLaterException e),
  void checkpointJobs(1: RequestContext context, 2: PinLaterCheckpointJobsRequest request)
      throws (1: PinLaterException e),
  map<string, PinLaterJobInfo> lookupJobs(1: RequestContext context,
                                          2: PinLaterLookupJobRequest request)
      throws (1: PinLaterException e),
  i32 getJobCount(1: RequestContext context, 2: PinLaterGetJobCountRequest request)
      throws (1: PinLaterException e),
  set<string> getQueueNames(1: RequestContext context)
      throws (1: PinLaterException e),
  PinLaterScanJobsResponse scanJobs(1: RequestContext context, 2: PinLaterScanJobsRequest request)
      throws (1: PinLaterException e),
  i32 retryFailedJobs(1: RequestContext context, 2: PinLaterRetryFailedJobsRequest request)
      throws (1: PinLaterException e),
  i32 deleteJobs(1: RequestContext context, 2: PinLaterDeleteJobsRequest request)
      throws (1: PinLaterException e),
  // extension: the schedules this server runs, with their next run times
  list<PinLaterScheduleInfo> getSchedules(1: RequestContext context,
                                          2: PinLaterGetSchedulesRequest request)
      throws (1: PinLaterException e),
}
