import java.io.File;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.impl.producer.TopicPublishInfo;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.admin.ConsumeStats;
import org.apache.rocketmq.common.admin.OffsetWrapper;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * A producer sending steadily and a push consumer while the test stops and starts the broker.
 *
 * Phases: "before" (the broker up; after --before SEND_OKs the producer pauses until all of them were
 * consumed and the broker holds the consumer's offsets, then prints "ready"), "outage" (the test stops
 * the broker when it reads "ready"; the producer keeps sending), "after" (from when the file
 * --ctl/restarted exists: the test started the broker again; --after more SEND_OKs, then the driver waits
 * until every SEND_OK message was consumed and prints the group's offsets).
 */
final class Failover {
    private Failover() {
    }

    static void restart() throws Exception {
        String topic = Driver.opt("topic");
        String group = Driver.opt("group", topic + "_cg");
        File restarted = new File(Driver.opt("ctl"), "restarted");
        int before = Driver.intOpt("before", 20);
        int after = Driver.intOpt("after", 20);
        int pauseMs = Driver.intOpt("pause", 100);
        Driver.createTopic(topic);
        AtomicReference<String> phase = new AtomicReference<>("before");
        Set<Integer> consumed = ConcurrentHashMap.newKeySet();
        Set<Integer> acked = ConcurrentHashMap.newKeySet();

        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(Driver.opt("ns"));
        c.setInstanceName("failover-consumer");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // commit offsets every second (default 5 s): the "ready" check waits for the commit
        c.setPersistConsumerOffsetInterval(1000);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                int idx = Integer.parseInt(m.getUserProperty("idx"));
                Driver.emit("consumed", "idx", idx, "phase", phase.get(), "queueId", m.getQueueId(),
                        "queueOffset", m.getQueueOffset(), "reconsumeTimes", m.getReconsumeTimes());
                consumed.add(idx);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();

        DefaultMQProducer p = new DefaultMQProducer(group + "_pg");
        p.setNamesrvAddr(Driver.opt("ns"));
        p.setInstanceName("failover-producer");
        // a short retry policy: one retry (default 2); RocketMQ's 3 s per attempt, as a shorter one could
        // time out a send the broker stored under load and store its retry twice
        p.setSendMsgTimeout(Driver.intOpt("sendTimeout", 3000));
        p.setRetryTimesWhenSendFailed(1);
        p.start();

        long end = Driver.deadline();
        int afterOk = 0;
        try {
            for (int i = 0; afterOk < after; i++) {
                if (System.currentTimeMillis() > end) {
                    throw new IllegalStateException("deadline: " + afterOk + " sends after the restart");
                }
                if (!"after".equals(phase.get()) && restarted.exists()) {
                    phase.set("after");
                }
                String ph = phase.get();
                if (send(p, topic, i, ph, acked) && "after".equals(ph)) {
                    afterOk++;
                }
                if ("before".equals(ph) && acked.size() >= before) {
                    waitConsumed(acked, consumed, end);
                    waitCommitted(group, topic, end);
                    phase.set("outage");
                    Driver.emit("ready", "acked", acked.size());
                }
                Thread.sleep(pauseMs);
            }
            waitConsumed(acked, consumed, end);
            waitCommitted(group, topic, end);
        } finally {
            p.shutdown();
            c.shutdown();
        }
    }

    /**
     * A master/slave pair whose master dies. Phase "master": --n sync sends (a SYNC_MASTER answers
     * SEND_OK once the slave has the message), then "ready"; the test kills the master and creates
     * --ctl/killed once the name server forgot it. Phase "slave": a push consumer of a new group starts
     * and must read every message from the slave, while the producer tries --tries more sends.
     */
    static void masterKilled() throws Exception {
        String topic = Driver.opt("topic");
        String group = Driver.opt("group", topic + "_cg");
        File killed = new File(Driver.opt("ctl"), "killed");
        int n = Driver.intOpt("n", 20);
        int tries = Driver.intOpt("tries", 10);
        Driver.createTopic(topic);
        Driver.createTopic(topic + "_probe");
        long end = Driver.deadline();

        DefaultMQProducer p = new DefaultMQProducer(group + "_pg");
        p.setNamesrvAddr(Driver.opt("ns"));
        p.setInstanceName("ha-producer");
        p.setSendMsgTimeout(3000);
        p.setRetryTimesWhenSendFailed(1);
        // learn the new route within a second (default 30 s)
        p.setPollNameServerInterval(1000);
        p.start();
        DefaultMQPushConsumer c = null;
        Set<Integer> consumed = ConcurrentHashMap.newKeySet();
        Set<Integer> acked = ConcurrentHashMap.newKeySet();
        try {
            // until the slave acknowledges (SYNC_MASTER answers SLAVE_NOT_AVAILABLE before): not printed
            while (true) {
                try {
                    if (p.send(new Message(topic + "_probe", "probe".getBytes(StandardCharsets.UTF_8)))
                            .getSendStatus().name().equals("SEND_OK")) {
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > end) {
                        throw e;
                    }
                }
                Thread.sleep(200);
            }
            for (int i = 0; i < n; i++) {
                send(p, topic, i, "master", acked);
            }
            Driver.emit("ready", "acked", acked.size());
            while (!killed.exists()) {
                if (System.currentTimeMillis() > end) {
                    throw new IllegalStateException("the test never killed the master");
                }
                Thread.sleep(100);
            }
            // the producer's next route poll (within a second) drops the master: the sends below see the
            // new route, not a cached one (which of them fail by connection refused is timing)
            while (true) {
                TopicPublishInfo info = p.getDefaultMQProducerImpl().getTopicPublishInfoTable().get(topic);
                if (info == null || info.getMessageQueueList().isEmpty()) {
                    break;
                }
                if (System.currentTimeMillis() > end) {
                    throw new IllegalStateException("the producer's route still names the master");
                }
                Thread.sleep(100);
            }
            c = new DefaultMQPushConsumer(group);
            c.setNamesrvAddr(Driver.opt("ns"));
            c.setInstanceName("ha-consumer");
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.setPersistConsumerOffsetInterval(1000);
            c.setPollNameServerInterval(1000);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    int idx = Integer.parseInt(m.getUserProperty("idx"));
                    Driver.emit("consumed", "idx", idx, "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(),
                            "reconsumeTimes", m.getReconsumeTimes());
                    consumed.add(idx);
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            for (int i = n; i < n + tries; i++) {
                send(p, topic, i, "slave", acked);
                Thread.sleep(300);
            }
            waitConsumed(acked, consumed, end);
            waitCommitted(group, topic, Math.min(end, System.currentTimeMillis() + 30000));
        } finally {
            p.shutdown();
            if (c != null) {
                c.shutdown();
            }
        }
    }

    /** Send message ``i``; the answer (or the failure) is emitted, and true when the broker acknowledged it. */
    static boolean send(DefaultMQProducer p, String topic, int i, String phase, Set<Integer> acked) {
        Message m = new Message(topic, "tagA", "key-" + i, ("body-" + i).getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("idx", Integer.toString(i));
        try {
            SendResult r = p.send(m);
            Driver.emit("send", "idx", i, "phase", phase, "status", String.valueOf(r.getSendStatus()),
                    "queueId", r.getMessageQueue().getQueueId(), "queueOffset", r.getQueueOffset());
            acked.add(i);
            return true;
        } catch (Exception e) {
            Driver.emit("send", "idx", i, "phase", phase, "error", Driver.error(e));
            return false;
        }
    }

    static void waitConsumed(Set<Integer> acked, Set<Integer> consumed, long end) throws InterruptedException {
        while (!consumed.containsAll(acked) && System.currentTimeMillis() < end) {
            Thread.sleep(100);
        }
    }

    /** Until the broker's consumer offsets reach the queues' ends, then print them. */
    static void waitCommitted(String group, String topic, long end) throws Exception {
        DefaultMQAdminExt a = Driver.admin();
        try {
            while (true) {
                ConsumeStats cs;
                try {
                    cs = a.examineConsumeStats(group);
                } catch (Exception e) {
                    // e.g. 206 (no offsets yet): asked again until the deadline, then printed
                    if (System.currentTimeMillis() > end) {
                        Driver.emit("offsets", "error", Driver.error(e));
                        return;
                    }
                    Thread.sleep(200);
                    continue;
                }
                Map<Integer, long[]> offsets = new TreeMap<>();
                boolean done = true;
                for (Map.Entry<MessageQueue, OffsetWrapper> e : cs.getOffsetTable().entrySet()) {
                    if (!e.getKey().getTopic().equals(topic)) {
                        continue;
                    }
                    OffsetWrapper w = e.getValue();
                    offsets.put(e.getKey().getQueueId(), new long[] {w.getBrokerOffset(), w.getConsumerOffset()});
                    done &= w.getBrokerOffset() == w.getConsumerOffset();
                }
                if (done || System.currentTimeMillis() > end) {
                    for (Map.Entry<Integer, long[]> e : offsets.entrySet()) {
                        Driver.emit("offset", "queueId", e.getKey(), "brokerOffset", e.getValue()[0],
                                "consumerOffset", e.getValue()[1]);
                    }
                    return;
                }
                Thread.sleep(200);
            }
        } finally {
            a.shutdown();
        }
    }
}
