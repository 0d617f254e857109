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
        // a short retry policy: one retry, one second per attempt (defaults: 2 retries, 3 s)
        p.setSendMsgTimeout(Driver.intOpt("sendTimeout", 1000));
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
                Message m = new Message(topic, "tagA", "key-" + i, ("body-" + i).getBytes(StandardCharsets.UTF_8));
                m.putUserProperty("idx", Integer.toString(i));
                try {
                    SendResult r = p.send(m);
                    Driver.emit("send", "idx", i, "phase", ph, "status", String.valueOf(r.getSendStatus()),
                            "queueId", r.getMessageQueue().getQueueId(), "queueOffset", r.getQueueOffset());
                    acked.add(i);
                    if ("after".equals(ph)) {
                        afterOk++;
                    }
                } catch (Exception e) {
                    Driver.emit("send", "idx", i, "phase", ph, "error", Driver.error(e));
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
                ConsumeStats cs = a.examineConsumeStats(group);
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
