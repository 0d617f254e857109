import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/** Request-reply, message trace and ACL scenarios. */
final class Rpc {
    private Rpc() {
    }

    static Map<String, Object> plain(Message m) {
        if (m instanceof MessageExt) {
            return Driver.message((MessageExt) m);
        }
        Map<String, Object> r = new TreeMap<>();
        r.put("topic", m.getTopic());
        r.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        r.put("properties", new TreeMap<>(m.getProperties()));
        return r;
    }

    /**
     * A responder (push consumer + producer, MessageUtil.createReplyMessage) and a requester: sync and
     * async request(); then a request nobody answers, which times out.
     */
    static void request() throws Exception {
        String topic = Driver.opt("topic");
        Driver.createTopic(topic);
        Driver.createTopic(topic + "_none");
        DefaultMQProducer replier = Consumers.producer(topic);
        List<MessageExt> served = new ArrayList<>();
        DefaultMQPushConsumer responder = new DefaultMQPushConsumer("G_" + topic);
        responder.setNamesrvAddr(Driver.opt("ns"));
        responder.setInstanceName("responder");
        responder.subscribe(topic, "*");
        responder.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                synchronized (served) {
                    served.add(m);
                }
                try {
                    Message reply = MessageUtil.createReplyMessage(m, ("reply-to-" + new String(m.getBody(),
                            StandardCharsets.UTF_8)).getBytes(StandardCharsets.UTF_8));
                    replier.send(reply);
                } catch (Exception e) {
                    Driver.emit("reply-failed", "error", Driver.error(e));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        responder.start();
        Consumers.settle(List.of(responder), Driver.intOpt("queues", 4));

        DefaultMQProducer requester = new DefaultMQProducer("pg_req_" + topic);
        requester.setNamesrvAddr(Driver.opt("ns"));
        requester.setInstanceName("requester");
        requester.start();
        Message m0 = Driver.numbered(topic, 0);
        Driver.emit("reply", "mode", "sync", "message", plain(requester.request(m0, 15000)));
        CountDownLatch done = new CountDownLatch(1);
        Message[] asyncReply = new Message[1];
        Throwable[] asyncError = new Throwable[1];
        requester.request(Driver.numbered(topic, 1), new RequestCallback() {
            @Override
            public void onSuccess(Message message) {
                // 4.9.8's client calls this once the request is sent (with no message yet), again
                // with the reply: the reply is what the application waits for
                if (message != null) {
                    asyncReply[0] = message;
                    done.countDown();
                }
            }

            @Override
            public void onException(Throwable e) {
                asyncError[0] = e;
                done.countDown();
            }
        }, 15000);
        done.await(30, TimeUnit.SECONDS);
        Driver.emit("reply", "mode", "async", "message", asyncReply[0] == null ? null : plain(asyncReply[0]),
                "error", asyncError[0] == null ? null : Driver.error(asyncError[0]));
        try {
            requester.request(Driver.numbered(topic + "_none", 2), 2000);
            Driver.emit("reply", "mode", "unanswered");
        } catch (Exception e) {
            Driver.emit("reply", "mode", "unanswered", "error", Driver.error(e));
        }
        requester.shutdown();
        responder.shutdown();
        replier.shutdown();
        served.sort((a, b) -> a.getUserProperty("idx").compareTo(b.getUserProperty("idx")));
        for (MessageExt m : served) {
            Driver.emit("served", "message", Driver.message(m));
        }
    }

    /**
     * enableMsgTrace on a producer and a push consumer: one message sent and consumed; both flush their
     * trace records to RMQ_SYS_TRACE_TOPIC at shutdown. Prints the msgId for queryMsgTraceById.
     */
    static void trace() throws Exception {
        String topic = Driver.opt("topic");
        Driver.createTopic(topic);
        DefaultMQProducer p = new DefaultMQProducer("PG_" + topic, true);
        p.setNamesrvAddr(Driver.opt("ns"));
        p.setInstanceName("traced-producer");
        p.start();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("G_" + topic, true);
        c.setNamesrvAddr(Driver.opt("ns"));
        c.setInstanceName("traced-consumer");
        c.subscribe(topic, "*");
        CountDownLatch got = new CountDownLatch(1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            msgs.forEach(m -> got.countDown());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Consumers.settle(List.of(c), Driver.intOpt("queues", 4));
        org.apache.rocketmq.client.producer.SendResult r = p.send(Driver.numbered(topic, 0));
        Driver.emit("send", "idx", 0, "result", Driver.sendResult(r));
        Driver.emit("consumed", "ok", got.await(60, TimeUnit.SECONDS));
        Thread.sleep(1000);  // the consumer's trace record is made after the listener returned
        c.shutdown();
        p.shutdown();
    }

    /**
     * One account's view of an ACL broker (``--ak``/``--sk``, none for an anonymous client): the topic is
     * made by the admin account (``--adminAk``/``--adminSk``), then this account sends two messages, pulls
     * the queues and reads its group's consume offset; each step prints its result or its exception.
     */
    static void acl() throws Exception {
        String topic = Driver.opt("topic");
        String ak = Driver.opts.remove("ak");
        String sk = Driver.opts.remove("sk");
        Driver.opts.put("ak", Driver.opt("adminAk"));
        Driver.opts.put("sk", Driver.opt("adminSk"));
        Driver.createTopic(topic);
        Driver.opts.remove("ak");
        Driver.opts.remove("sk");
        if (ak != null) {
            Driver.opts.put("ak", ak);
            Driver.opts.put("sk", sk);
        }
        DefaultMQProducer p = new DefaultMQProducer("PG_" + topic, Driver.rpcHook());
        p.setNamesrvAddr(Driver.opt("ns"));
        p.setInstanceName("acl-p-" + System.nanoTime());
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        for (int i = 0; i < 2; i++) {
            try {
                Driver.emit("send", "idx", i, "result", Driver.sendResult(p.send(Driver.numbered(topic, i),
                        Consumers.BY_IDX, 0)));
            } catch (Exception e) {
                Driver.emit("send", "idx", i, "error", Driver.error(e));
            }
        }
        p.shutdown();
        org.apache.rocketmq.client.consumer.DefaultMQPullConsumer c =
            new org.apache.rocketmq.client.consumer.DefaultMQPullConsumer(Driver.opt("group"), Driver.rpcHook());
        c.setNamesrvAddr(Driver.opt("ns"));
        c.setInstanceName("acl-c-" + System.nanoTime());
        c.start();
        org.apache.rocketmq.common.message.MessageQueue q0 =
            new java.util.TreeSet<>(c.fetchSubscribeMessageQueues(topic)).first();
        try {
            org.apache.rocketmq.client.consumer.PullResult r = c.pull(q0, "*", 0, 32);
            List<Object> bodies = new ArrayList<>();
            if (r.getMsgFoundList() != null) {
                r.getMsgFoundList().forEach(m -> bodies.add(new String(m.getBody(), StandardCharsets.UTF_8)));
            }
            Driver.emit("pull", "status", String.valueOf(r.getPullStatus()), "bodies", bodies);
        } catch (Exception e) {
            Driver.emit("pull", "error", Driver.error(e));
        }
        try {
            Driver.emit("consumeOffset", "offset", c.fetchConsumeOffset(q0, true));
        } catch (Exception e) {
            Driver.emit("consumeOffset", "error", Driver.error(e));
        }
        c.shutdown();
    }
}
