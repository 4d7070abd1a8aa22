// A job's ranks meet over TCP at one address ($TILEDIST_MASTER, HOST:PORT), where rank 0
// listens and every other rank connects: how ranks on several hosts (tiledist-run on each host
// with --master, or mpirun across hosts) find each other. Over these connections go the host
// world's collectives that shared memory cannot carry across hosts (barriers, the agreement on
// symmetric allocations, small exchanges such as NVSHMEM's unique id), and failures: a rank that
// reports one, or whose connection ends before it said goodbye (a process that died, a host
// lost), is named to every rank, so that their waits end with that rank's name.
//
// The star through rank 0: a collective is one message from each rank to rank 0 and one back.
// A thread per rank reads its connections, so that failures arrive while the rank computes
// (and rank 0 forwards them) without the rank polling.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tiledist::runtime {

class Rendezvous {
 public:
  /// Joins the job at `master` ("host:port"; rank 0 listens on that port on every interface),
  /// telling the others this rank's `node` (its host and session: ranks with the same node
  /// share memory) and learning theirs. Throws Error naming the address where rank 0 cannot
  /// listen, where a rank cannot reach it within `timeout_s`, or when the ranks disagree on
  /// the world's size or a rank number comes twice.
  Rendezvous(int rank, int size, const std::string& master, const std::string& node, double timeout_s);
  /// Says goodbye (leave()) and stops the reading thread.
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  /// Each rank's node, in rank order.
  const std::vector<std::string>& nodes() const { return nodes_; }
  /// Collective, in the same order on every rank: every rank's `mine`, in rank order. Waits at
  /// most the timeout; throws Error naming `what` and the rank on a timeout, a failure heard
  /// of, a rank that left before taking part, or what `check` (called while waiting: the local
  /// peers' health) returns when it is not empty.
  std::vector<std::string> all_gather(const std::string& mine, const std::string& what,
                                      const std::function<std::string()>& check = {});
  /// Tells every rank that this one failed with `message` (the first failure each hears of
  /// is the one problem() names).
  void report_failure(const std::string& message);
  /// The failure heard of ("rank 3 failed: ...", "rank 2 (on host b) has died: ..."), or "".
  std::string problem() const;
  /// Says goodbye: this rank is ending normally, so its connection's end is no failure. Later
  /// collectives that need this rank fail at once on the others, naming it.
  void leave();
  /// The address rank 0 listens on ("host:port"), as given.
  const std::string& master() const { return master_; }

 private:
  struct Peer;
  void serve();  // the reading thread
  void on_message(int from_fd_index, uint32_t type, int32_t from, int64_t seq, std::string payload);
  void on_closed(int fd_index);                   // the connection to peer fd_index ended
  void complete_if_ready(int64_t seq);            // rank 0: a gather that has every part
  void note_problem(const std::string& problem);  // (the first one stays)
  void forward_failure(int failed, const std::string& message, int except);
  void send(Peer& to, uint32_t type, int32_t from, int64_t seq, const std::string& payload);

  int rank_ = 0, size_ = 1;
  double timeout_s_ = 120;
  std::string master_;
  std::vector<std::string> nodes_;
  std::vector<std::unique_ptr<Peer>> peers_;  // rank 0: one per other rank (by rank); else rank 0's alone
  int wake_[2] = {-1, -1};                    // a pipe that ends the reading thread
  std::thread reader_;
  bool left_ = false;

  mutable std::mutex mutex_;  // guards what follows, shared with the reading thread
  std::condition_variable changed_;
  std::string problem_;
  int64_t seq_ = 0;                                        // this rank's collectives so far
  std::map<int64_t, std::map<int, std::string>> gathers_;  // rank 0: the parts of each collective
  std::map<int64_t, std::vector<std::string>> results_;    // each finished collective's parts
  std::map<int64_t, std::string> refused_;                 // a collective a rank left before
  std::vector<bool> gone_;                                 // ranks that said goodbye (or died)
  std::vector<std::string> died_;                          // why, for those that died
};

}  // namespace tiledist::runtime
