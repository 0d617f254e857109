import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/** DefaultLitePullConsumer (subscribe / assign, seek, commit) and DefaultMQPullConsumer scenarios. */
final class Pulls {
    private Pulls() {
    }

    static DefaultLitePullConsumer lite(String group) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group, Driver.rpcHook());
        c.setNamesrvAddr(Driver.opt("ns"));
        c.setInstanceName("lite-" + System.nanoTime());
        c.setAutoCommit(false);
        return c;
    }

    /** Poll until ``expect`` messages came (then ``quiet`` ms more, for anything extra); emit them sorted. */
    static List<MessageExt> pollAll(DefaultLitePullConsumer c, String kind, int expect) {
        List<MessageExt> got = new ArrayList<>();
        long end = Driver.deadline();
        long quietUntil = Long.MAX_VALUE;
        while (System.currentTimeMillis() < Math.min(end, quietUntil)) {
            got.addAll(c.poll(200));
            if (got.size() >= expect && quietUntil == Long.MAX_VALUE) {
                quietUntil = System.currentTimeMillis() + Driver.intOpt("quiet", 1500);
            }
        }
        got.sort(Comparator.comparing(MessageExt::getQueueId).thenComparing(MessageExt::getQueueOffset));
        for (MessageExt m : got) {
            Driver.emit(kind, "message", Driver.message(m));
        }
        return got;
    }

    static void emitCommitted(DefaultLitePullConsumer c, String topic, String step) throws Exception {
        for (MessageQueue mq : new TreeSet<>(c.fetchMessageQueues(topic))) {
            Driver.emit("committed", "step", step, "queue", Driver.queue(mq), "offset", c.committed(mq));
        }
    }

    static void persistSync(DefaultLitePullConsumer c, String topic) throws Exception {
        for (MessageQueue mq : new TreeSet<>(c.fetchMessageQueues(topic))) {
            Long offset = c.committed(mq);
            if (offset != null && offset >= 0) {
                c.getOffsetStore().updateConsumeOffsetToBroker(mq, offset, false);
            }
        }
    }

    static void liteSubscribe() throws Exception {
        String topic = Driver.opt("topic");
        String group = Driver.opt("group");
        int n = Driver.intOpt("n", 8);
        DefaultMQProducer p = Consumers.seeded(topic, n);
        DefaultLitePullConsumer c = lite(group);
        c.subscribe(topic, Driver.opt("filter", "*"));
        c.start();
        pollAll(c, "polled", Driver.intOpt("expect", n));
        c.commitSync();
        emitCommitted(c, topic, "first");
        // 4.9's commitSync only records offsets in the client; its timer and shutdown send them oneway, and a
        // loaded host lost such a send to the Java broker once (the group then restarted at the last offset).
        // Persisting them with a request that waits for the answer makes the restart below deterministic.
        persistSync(c, topic);
        c.shutdown();
        Consumers.emitOffsets(group);
        // the same group again: it resumes at the committed offsets, so only what is sent now arrives
        DefaultLitePullConsumer again = lite(group);
        again.subscribe(topic, Driver.opt("filter", "*"));
        again.start();
        Consumers.send(p, topic, n, n + 2);
        pollAll(again, "polled-again", 2);
        again.commitSync();
        emitCommitted(again, topic, "again");
        again.shutdown();
        p.shutdown();
    }

    static void liteAssign() throws Exception {
        String topic = Driver.opt("topic");
        String group = Driver.opt("group");
        int n = Driver.intOpt("n", 8);
        DefaultMQProducer p = Consumers.seeded(topic, n);
        p.shutdown();
        DefaultLitePullConsumer c = lite(group);
        c.start();
        List<MessageQueue> mqs = new ArrayList<>(new TreeSet<>(c.fetchMessageQueues(topic)));
        c.assign(mqs);
        for (MessageQueue mq : mqs) {
            Driver.emit("offsetForTimestamp", "queue", Driver.queue(mq), "zero", c.offsetForTimestamp(mq, 0L),
                    "future", c.offsetForTimestamp(mq, System.currentTimeMillis() + 86_400_000L));
        }
        try {
            c.seek(mqs.get(0), 100);
        } catch (Exception e) {
            Driver.emit("seek", "offset", 100, "error", Driver.error(e));
        }
        c.seek(mqs.get(0), 1);
        c.seekToEnd(mqs.get(1));
        c.seekToBegin(mqs.get(2));
        c.seek(mqs.get(3), c.offsetForTimestamp(mqs.get(3), 0L));
        pollAll(c, "polled", Driver.intOpt("expect", n));
        c.commitSync();
        emitCommitted(c, topic, "after");
        c.shutdown();
    }

    static Map<String, Object> pullResult(PullResult r) {
        Map<String, Object> m = new TreeMap<>();
        m.put("status", String.valueOf(r.getPullStatus()));
        m.put("nextBeginOffset", r.getNextBeginOffset());
        m.put("minOffset", r.getMinOffset());
        m.put("maxOffset", r.getMaxOffset());
        List<Object> msgs = new ArrayList<>();
        if (r.getMsgFoundList() != null) {
            r.getMsgFoundList().forEach(x -> msgs.add(Driver.message(x)));
        }
        m.put("messages", msgs);
        return m;
    }

    static void pull() throws Exception {
        String topic = Driver.opt("topic");
        String group = Driver.opt("group");
        int n = Driver.intOpt("n", 8);
        DefaultMQProducer p = Consumers.seeded(topic, n);
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, Driver.rpcHook());
        c.setNamesrvAddr(Driver.opt("ns"));
        c.setInstanceName("pull-" + System.nanoTime());
        c.start();
        try {
            c.fetchSubscribeMessageQueues("NoSuchTopic_" + topic);
        } catch (Exception e) {
            Driver.emit("fetchQueues", "error", Driver.error(e));
        }
        List<MessageQueue> mqs = new ArrayList<>(new TreeSet<>(c.fetchSubscribeMessageQueues(topic)));
        for (MessageQueue mq : mqs) {
            Driver.emit("bounds", "queue", Driver.queue(mq), "min", c.minOffset(mq), "max", c.maxOffset(mq),
                    "searchZero", c.searchOffset(mq, 0L),
                    "searchFuture", c.searchOffset(mq, System.currentTimeMillis() + 86_400_000L),
                    "consumeOffset", c.fetchConsumeOffset(mq, true));
        }
        MessageQueue q0 = mqs.get(0);
        Driver.emit("pull", "case", "all", "result", pullResult(c.pull(q0, "*", 0, 32)));
        Driver.emit("pull", "case", "one", "result", pullResult(c.pull(q0, "*", 0, 1)));
        Driver.emit("pull", "case", "tag", "result", pullResult(c.pull(q0, "tagB || tagC", 0, 32)));
        // the client filters by SQL92 only at brokers whose version a heartbeat has told it
        c.getDefaultMQPullConsumerImpl().getRebalanceImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
        Driver.emit("pull", "case", "sql", "result", pullResult(c.pull(q0, MessageSelector.bySql("idx >= 4"), 0, 32)));
        Driver.emit("pull", "case", "end", "result", pullResult(c.pull(q0, "*", 2, 32)));
        Driver.emit("pull", "case", "past-end", "result", pullResult(c.pull(q0, "*", 100, 32)));
        // a blocking pull at the end of queue 1 returns with the message sent meanwhile (long polling)
        Thread sender = new Thread(() -> {
            try {
                Thread.sleep(1000);
                Consumers.send(p, topic, n + 1, n + 2);
            } catch (Exception e) {
                Driver.emit("fatal", "error", Driver.error(e));
            }
        });
        sender.start();
        Driver.emit("pull", "case", "block", "result", pullResult(c.pullBlockIfNotFound(mqs.get(1), "*", 2, 32)));
        sender.join();
        c.updateConsumeOffset(q0, 2);
        c.getOffsetStore().persist(q0);
        // persist is oneway: the broker applies it on its own time, so read until it shows (bounded)
        long stored = c.fetchConsumeOffset(q0, true);
        for (long deadline = System.currentTimeMillis() + 8000; stored != 2 && System.currentTimeMillis() < deadline; ) {
            Thread.sleep(100);
            stored = c.fetchConsumeOffset(q0, true);
        }
        Driver.emit("consumeOffset", "queue", Driver.queue(q0), "offset", stored);
        c.shutdown();
        p.shutdown();
    }
}
